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


def test_device_type(tf):
    assert check("01.3", lambda t: tf.DeviceSpec.from_string(t.device).device_type).passed
    assert UNTOUCHED in check("01.3", lambda t: None).message
    verdict = check("01.3", lambda t: "CPU")  # right here, wrong on the stand-in GPU result
    assert not verdict.passed and "not 'GPU'" in verdict.message


@pytest.mark.parametrize("right", [
    lambda t: tf_module().DeviceSpec.from_string(t.backing_device).device_type,  # its memory
    lambda t: t.device.split("/")[-1].split(":")[-2],  # the string read by hand
], ids=["backing_device", "by-hand"])
def test_device_type_right_written_otherwise(tf, right):
    verdict = check("01.3", right)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("wrong", "says"), [
    (lambda t: t.device, "not 'CPU'"),  # the whole string
    (lambda t: t.device.split(":")[-1], "not 'CPU'"),  # the index, not the type
    (lambda t: t.device.split("/")[-1], "not 'CPU'"),  # "device:CPU:0"
])
def test_device_type_wrong_answers(tf, wrong, says):
    verdict = check("01.3", wrong)
    assert not verdict.passed and says in verdict.message


def tf_module():
    return import_tensorflow()
