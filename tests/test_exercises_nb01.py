"""Notebook 01's exercise checks (helpers/exercises/nb01.py): each says right to a right answer,
and not yet to the placeholder and to the usual wrong answers."""

import os

import numpy as np
import pytest

from helpers.exercises import check
from helpers.logs import import_tensorflow

UNTOUCHED = "still holds its placeholder"


@pytest.fixture(scope="module")
def tf():
    return import_tensorflow()


def test_gpu_count(tf):
    assert check("01.1", len(tf.config.list_physical_devices("GPU"))).passed
    assert UNTOUCHED in check("01.1", ...).message
    assert "not an int" in check("01.1", tf.config.list_physical_devices("GPU")).message
    assert "but TensorFlow sees" in check("01.1", 99).message
    assert "but TensorFlow sees" in check("01.1", len(tf.config.list_logical_devices())).message
    assert "not an int" in check("01.1", bool(tf.config.list_physical_devices("GPU"))).message
    gpus = tf.config.list_physical_devices("GPU")
    assert check("01.1", np.int64(len(gpus))).passed  # a NumPy integer is an integer
    assert check("01.1", sum(1 for d in gpus if d.device_type == "GPU")).passed


def test_hidden_gpu_env():
    assert check("01.2", lambda: {**os.environ, "CUDA_VISIBLE_DEVICES": ""}).passed
    assert check("01.2", lambda: {**os.environ, "CUDA_VISIBLE_DEVICES": "-1"}).passed
    assert UNTOUCHED in check("01.2", lambda: None).message
    assert "lose" in check("01.2", lambda: {"CUDA_VISIBLE_DEVICES": ""}).message
    assert "still see the GPUs" in check("01.2", lambda: dict(os.environ)).message


def test_hidden_gpu_env_that_changes_this_process_is_caught_and_undone():
    before = dict(os.environ)

    def in_place():
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return dict(os.environ)

    verdict = check("01.2", in_place)
    assert not verdict.passed and "changed this process" in verdict.message
    assert dict(os.environ) == before, "the check puts the environment back"


def asked_and_checked(device, fn):  # the solution's idea, written otherwise
    tf = tf_module()
    with tf.device(device):
        result = fn()
    asked = tf.DeviceSpec.from_string(device)
    ran = tf.DeviceSpec.from_string(result.device)
    if (ran.device_type, ran.device_index) != (asked.device_type, asked.device_index):
        raise ValueError(f"{device} asked, {result.device} used")
    return result


def strict_placement(device, fn):  # no fall-back at all: TensorFlow itself refuses
    tf = tf_module()
    tf.config.set_soft_device_placement(False)
    try:
        with tf.device(device):
            return fn()
    finally:
        tf.config.set_soft_device_placement(True)


def trusting(device, fn):  # the usual mistake: tf.device alone
    with tf_module().device(device):
        return fn()


def ignores_device(device, fn):
    return fn()


def checks_without_asking(device, fn):  # raises for a missing GPU, but never asks for one
    result = fn()
    if not result.device.endswith(device.lstrip("/")):
        raise RuntimeError(f"{device} asked, {result.device} used")
    return result


def device_string_only(device, fn):  # checks the request, not where it ran
    if "GPU" in device and not tf_module().config.list_physical_devices("GPU"):
        return fn()
    with tf_module().device(device):
        return fn()


def asserts_before_running(device, fn):  # NameError: a bug, not a refusal
    with tf_module().device(device):
        result = fn()
    if not result.device.endswith(devce.lstrip("/")):  # noqa: F821  (the learner's typo)
        raise RuntimeError("elsewhere")
    return result


def test_run_on_untouched_is_not_done():
    def run_on(device, fn):
        """docstring"""
        ...

    assert UNTOUCHED in check("01.3", run_on).message


@pytest.mark.parametrize("right", [asked_and_checked, strict_placement])
def test_run_on_right_written_otherwise(tf, right):
    verdict = check("01.3", right)
    assert verdict.passed, verdict.message
    assert tf.config.get_soft_device_placement()  # the check put it back


@pytest.mark.parametrize(("wrong", "says"), [
    (trusting, "said nothing"),
    (ignores_device, "without asking for that device"),
    (checks_without_asking, "without asking for that device"),
    (device_string_only, "said nothing"),
    (asserts_before_running, "NameError"),
    (lambda device, fn: fn().numpy(), "not the result tensor"),
])
def test_run_on_wrong_answers(tf, wrong, says):
    verdict = check("01.3", wrong)
    assert not verdict.passed and says in verdict.message, verdict.message


def tf_module():
    return import_tensorflow()
