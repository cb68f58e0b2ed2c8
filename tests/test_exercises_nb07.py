"""Notebook 07's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

import json
import os

import pytest

from helpers.exercises import check
from tools.exercises import solution_functions


def tf_config(addresses, index):  # notebook 07's own
    return {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}


# the solutions learners are given, with the notebook's names they use
SOLVED = solution_functions("07_scale_out_profile", json=json, tf_config=tf_config)


# 07.1: write TF_CONFIG for worker i


def test_07_1_right():
    result = check("07.1", SOLVED["tf_config_env"])
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda addresses, index: None, "placeholder"),
    (tf_config, "It returned a dict"),
    (lambda addresses, index: str(tf_config(addresses, index)), "not JSON"),
    (lambda addresses, index: json.dumps(tf_config(addresses, 0)), "its own index"),
    (lambda addresses, index: json.dumps(tf_config([addresses[index]], index)),
     "the whole cluster"),
    (lambda addresses, index: json.dumps({"cluster": {"worker": addresses},
                                          "task": {"type": "chief", "index": index}}),
     "'type': 'worker'"),
])
def test_07_1_wrong(answer, expected):
    result = check("07.1", answer)
    assert not result.passed
    assert expected in result.message


def _sets_the_kernels_env(addresses, index):  # a worker's line, run in the kernel
    os.environ["TF_CONFIG"] = json.dumps(tf_config(addresses, index))
    return os.environ["TF_CONFIG"]


def test_07_1_an_answer_that_sets_tf_config_here_is_wrong_and_undone(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    result = check("07.1", _sets_the_kernels_env)
    assert not result.passed and "set TF_CONFIG in this kernel's own environment" in result.message
    assert "TF_CONFIG" not in os.environ, "the check puts the kernel's environment back"


@pytest.mark.parametrize("answer", [
    lambda addresses, index: json.dumps(tf_config(addresses, index), indent=2, sort_keys=True),
    lambda addresses, index: json.dumps({"task": {"index": index, "type": "worker"},
                                         "cluster": {"worker": [*addresses]}}),
], ids=["indented", "written-out"])
def test_07_1_right_written_otherwise(answer):
    assert check("07.1", answer).passed


# 07.2: compute the scaling efficiency


def test_07_2_right():
    result = check("07.2", SOLVED["scaling_efficiency"])
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda images_per_s: ..., "placeholder"),
    (lambda ips: {n: v / ips[min(ips)] for n, v in ips.items()}, "the speedup"),
    (lambda ips: {n: v / next(iter(ips.values())) / n for n, v in ips.items()},
     "at 1 replicas, not 1"),
    (lambda ips: {n: v / ips[min(ips)] / n for n, v in ips.items()},
     "it gave 0.5 at 2 replicas, not 1"),
    (lambda ips: [1.0] * len(ips), "not a dict"),
])
def test_07_2_wrong(answer, expected):
    result = check("07.2", answer)
    assert not result.passed
    assert expected in result.message


def test_07_2_the_slowest_count_is_not_the_baseline():
    """On logical devices of one chip, 1 replica can be faster than 2: the baseline is the
    smallest replica count, not the smallest images/s."""
    def slowest_as_baseline(ips):
        base = min(ips.values())
        return {n: v / base / (n / min(ips)) for n, v in ips.items()}

    result = check("07.2", slowest_as_baseline)
    assert not result.passed and "it gave 1.25 at 1 replicas" in result.message


@pytest.mark.parametrize("answer", [
    lambda ips: (lambda b: {n: ips[n] / ips[b] * b / n for n in sorted(ips)})(min(ips)),
    lambda ips: {n: (v / ips[min(ips)]) / (n / min(ips)) for n, v in sorted(ips.items())},
], ids=["rearranged", "sorted-items"])
def test_07_2_right_written_otherwise(answer):
    assert check("07.2", answer).passed


# 07.3: read the first fix from a trace


def idle_first(summary):  # idle time counts the input wait too
    if summary.idle_share - summary.input_share > 0.3:
        return "idle"
    return "input" if summary.input_share > 0.2 else "compute"


def no_subtraction(summary):
    if summary.input_share > 0.2:
        return "input"
    return "idle" if summary.idle_share > 0.3 else "compute"


def test_07_3_right():
    result = check("07.3", SOLVED["first_fix"])
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda summary: None, "placeholder"),
    (idle_first, "input_share=30%, idle_share=90% it said 'idle', not 'input'"),
    (no_subtraction, "input_share=15%, idle_share=40% it said 'idle', not 'compute'"),
    (lambda summary: "Input", "not 'input'"),
])
def test_07_3_wrong(answer, expected):
    result = check("07.3", answer)
    assert not result.passed
    assert expected in result.message


def at_least(summary):  # ">=" where the task says "more than"
    if summary.input_share >= 0.2:
        return "input"
    return "idle" if summary.idle_share - summary.input_share >= 0.3 else "compute"


def test_07_3_more_than_is_not_at_least():
    result = check("07.3", at_least)
    assert not result.passed
    assert "input_share=20%, idle_share=25% it said 'input', not 'compute'" in result.message


def one_expression(summary):
    waits, idles = summary.input_share > 0.2, summary.idle_share - summary.input_share > 0.3
    return "input" if waits else "idle" if idles else "compute"


def idle_besides(summary):
    besides_input = summary.idle_share - summary.input_share
    for fix, share, limit in (("input", summary.input_share, 0.2), ("idle", besides_input, 0.3)):
        if share > limit:
            return fix
    return "compute"


@pytest.mark.parametrize("answer", [one_expression, idle_besides])
def test_07_3_right_written_otherwise(answer):
    assert check("07.3", answer).passed
