"""Notebook 07's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

import json

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
