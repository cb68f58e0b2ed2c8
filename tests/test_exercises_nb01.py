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
    assert check("01.2", lambda: dict(os.environ, CUDA_VISIBLE_DEVICES="")).passed


def copy_then_hide():
    env = os.environ.copy()
    env["CUDA_VISIBLE_DEVICES"] = "-1"
    return env


def copy_then_pop():  # drops the variable: the child sees every GPU again
    env = os.environ.copy()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_hidden_gpu_env_where_this_machine_already_hides_them(monkeypatch):
    """Previously accepted where CUDA_VISIBLE_DEVICES was already "" or unset: the check now
    stages a chosen GPU first."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "still see the GPUs" in check("01.2", lambda: dict(os.environ)).message
    assert "still see the GPUs" in check("01.2", copy_then_pop).message
    assert "lose" in check("01.2", lambda: {"CUDA_VISIBLE_DEVICES": "",
                                           "HOME": os.environ.get("HOME", "")}).message
    assert check("01.2", copy_then_hide).passed
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "", "the check puts the environment back"


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


def bare_exception(device, fn):  # previously rejected: the task names no error type
    with tf_module().device(device):
        result = fn()
    if result.device.split("device:")[-1] != device.strip("/"):
        raise Exception(f"wanted {device}, got {result.device}")
    return result


def type_only(device, fn):  # previously accepted on a CPU machine: /CPU:1 falls back to /CPU:0
    tf = tf_module()
    with tf.device(device):
        result = fn()
    if tf.DeviceSpec.from_string(result.device).device_type not in device:
        raise RuntimeError("wrong device type")
    return result


def refuses_any_gpu(device, fn):  # previously accepted on a CPU machine
    if "GPU" in device and not tf_module().config.list_physical_devices("GPU"):
        raise RuntimeError("no GPU here")
    with tf_module().device(device):
        return fn()


def refuses_any_index_but_0(device, fn):  # right on one CPU; wrong on a split one (see below)
    if not device.endswith(":0"):
        raise RuntimeError(f"no {device}")
    with tf_module().device(device):
        return fn()


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


@pytest.mark.parametrize("right", [asked_and_checked, strict_placement, bare_exception])
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
    (type_only, "Asked for /CPU:1"),
    (refuses_any_gpu, "Asked for /CPU:1"),
    (lambda device, fn: fn().numpy(), "not the result tensor"),
])
def test_run_on_wrong_answers(tf, wrong, says):
    verdict = check("01.3", wrong)
    assert not verdict.passed and says in verdict.message, verdict.message


def tf_module():
    return import_tensorflow()


SPLIT_CPU = """
from helpers.logs import import_tensorflow
tf = import_tensorflow()
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import test_exercises_nb01 as answers
from helpers.exercises import check
for name in ("asked_and_checked", "bare_exception", "refuses_any_index_but_0", "type_only"):
    verdict = check("01.3", getattr(answers, name))
    print(name, verdict.passed, verdict.message[:60])
"""


def test_run_on_with_two_logical_cpus(fresh_process):
    """Where Setup split the CPU, an answer that refuses every index but 0 fails on /CPU:1."""
    tests = os.path.dirname(os.path.abspath(__file__))
    run = fresh_process(f"import sys\nsys.path.insert(0, {tests!r})\n{SPLIT_CPU}")
    assert run.returncode == 0, run.output
    for line in ("asked_and_checked True", "bare_exception True",
                 "refuses_any_index_but_0 False Your code raised RuntimeError: no /CPU:1",
                 "type_only False Asked for /CPU:2, which this runtime does not have"):
        assert line in run.output, run.output


def test_run_on_a_failed_try_does_not_break_the_next(tf):
    def strict_and_crashing(device, fn):  # turns soft placement off, then fails, never back on
        tf.config.set_soft_device_placement(False)
        raise ZeroDivisionError("oops")

    assert "ZeroDivisionError" in check("01.3", strict_and_crashing).message
    assert tf.config.get_soft_device_placement()
    assert check("01.3", asked_and_checked).passed
