"""Notebook 07's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

import pytest

from helpers.exercises import check
from tools.exercises import solution_functions


@pytest.fixture(scope="module")
def solved(tf):
    """The solutions learners are given, with the notebook's names they use."""
    return solution_functions("07_scale_out_profile", tf=tf)


# 07.1: resume from the latest checkpoint


def test_07_1_right(solved):
    result = check("07.1", solved["resume"])
    assert result.passed, result.message


def test_07_1_untouched():
    def resume(checkpoint, directory):
        """docstring"""
        ...

    assert "still holds its placeholder" in check("07.1", resume).message


def via_manager(checkpoint, directory):  # the manager finds the newest as well
    import tensorflow as tf

    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None)
    checkpoint.restore(manager.latest_checkpoint).expect_partial()  # None: nothing to restore
    return checkpoint.step.numpy().item()


def with_numpy_step(checkpoint, directory):
    import tensorflow as tf

    if path := tf.train.latest_checkpoint(directory):
        checkpoint.read(path).assert_existing_objects_matched()
    return checkpoint.step.numpy()  # a NumPy int64 is an integer


def oldest(checkpoint, directory):
    import tensorflow as tf

    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
    if manager.checkpoints:
        checkpoint.restore(manager.checkpoints[0])
    return int(checkpoint.step)


def number_in_the_name(checkpoint, directory):
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    if not latest:
        return 0
    checkpoint.restore(latest)
    return int(latest.rsplit("-", 1)[1])


def not_restored(checkpoint, directory):
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    return int(tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE")) if latest else 0


def returns_the_status(checkpoint, directory):
    import tensorflow as tf

    return checkpoint.restore(tf.train.latest_checkpoint(directory))


@pytest.mark.parametrize("answer", [via_manager, with_numpy_step])
def test_07_1_right_written_otherwise(answer):
    result = check("07.1", answer)
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (oldest, "not those of the newest checkpoint"),
    (number_in_the_name, "(ckpt-3)"),
    (not_restored, "restore the checkpoint"),
    (returns_the_status, "not the step to start from"),
])
def test_07_1_wrong(answer, expected):
    result = check("07.1", answer)
    assert not result.passed and expected in result.message, result.message


# 07.2: compute the scaling efficiency


def test_07_2_right(solved):
    result = check("07.2", solved["scaling_efficiency"])
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
