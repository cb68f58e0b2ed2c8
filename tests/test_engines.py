"""Which engine notebook 05 picks on each kind of runtime, with fakes for the hardware."""

import pytest

from helpers import devices, engines
from helpers.devices import TPUStatus
from helpers.params import ParameterError


def runtime(modules=("tensorflow", "jax"), hardware=False, tf_reaches_tpu=False, gpus=0):
    """A runtime as :func:`engines.inspect_runtime` sees it, from fakes only."""

    def detect():
        return TPUStatus(True, resolver="r" if tf_reaches_tpu else None, message="no resolver")

    return engines.inspect_runtime(
        has_module=lambda name: name in modules,
        tpu_hardware=lambda: hardware,
        detect_tpu=detect,
        count_gpus=lambda: gpus,
    )


KAGGLE_TPU = runtime(("tensorflow", "jax", "libtpu"), hardware=True, tf_reaches_tpu=True)
COLAB_TPU = runtime(("jax", "libtpu"), hardware=True)  # JAX and no TensorFlow (2025 on)
COLAB_GPU = runtime(gpus=1)
CPU = runtime()


def test_tensorflow_on_a_tpu_it_reaches_and_jax_on_simulated_devices():
    plan = engines.choose(KAGGLE_TPU)
    assert (plan.tf, plan.jax, plan.tf_devices, plan.jax_devices) == ("tpu", "cpu", 0, 8)
    assert "TPUStrategy" in plan.reason and "one process" in plan.reason


def test_keras_on_jax_on_a_tpu_without_tensorflow():
    plan = engines.choose(COLAB_TPU)
    assert (plan.tf, plan.jax, plan.jax_devices) == (None, "tpu", 0)
    assert "TensorFlow is not installed" in plan.reason
    assert plan.describe() == ["TensorFlow: not run here", "Keras on JAX: the TPU"]


def test_jax_takes_a_tpu_tensorflow_cannot_reach():
    installed_but_blind = runtime(("tensorflow", "jax", "libtpu"), hardware=True)
    plan = engines.choose(installed_but_blind)
    assert (plan.tf, plan.jax, plan.tf_devices) == ("cpu", "tpu", 8)
    assert "TensorFlow cannot reach the TPU" in plan.reason


def test_a_gpu_goes_to_tensorflow_and_jax_stays_on_the_cpu():
    plan = engines.choose(COLAB_GPU, simulated={"tf": 4, "jax": 2})
    assert (plan.tf, plan.jax, plan.tf_devices, plan.jax_devices) == ("gpu", "cpu", 0, 2)


def test_cpu_only_runs_both_engines_on_simulated_devices():
    plan = engines.choose(CPU)
    assert (plan.tf, plan.jax, plan.tf_devices, plan.jax_devices) == ("cpu", "cpu", 8, 8)
    assert plan.describe() == [
        "TensorFlow: 8 simulated CPU device(s)",
        "Keras on JAX: 8 simulated CPU device(s)",
    ]


def test_forcing_the_cpu_and_leaving_an_engine_out():
    assert engines.choose(KAGGLE_TPU, "cpu").tf == "cpu"
    only_jax = engines.choose(CPU, simulated={"jax": 8})
    assert only_jax.tf is None and only_jax.jax == "cpu"


def test_a_tpu_neither_engine_can_drive_leaves_both_on_the_cpu():
    plan = engines.choose(runtime(hardware=True))  # no libtpu, TF's resolver fails
    assert (plan.tf, plan.jax) == ("cpu", "cpu")
    assert "tpu" not in engines.available_accelerators(runtime(hardware=True))


def test_accelerator_rule_allows_a_tpu_for_either_engine():
    assert engines.accelerator_rule(COLAB_TPU)("accelerator", "tpu") == "tpu"
    assert engines.accelerator_rule(KAGGLE_TPU)("accelerator", "tpu") == "tpu"
    with pytest.raises(ParameterError) as error:
        engines.accelerator_rule(CPU)("accelerator", "tpu")
    assert str(error.value) == (
        "Invalid parameter accelerator='tpu': this runtime has no TPU; allowed here: 'auto', 'cpu'."
    )


@pytest.mark.parametrize(
    "value, message",
    [
        ({"tf": 0}, "'tf' needs a device count from 1 to 64, not 0"),
        ({"torch": 8}, "engines are 'tf', 'jax', not 'torch'"),
        (8, "expected a dict of engine to device count"),
        ({}, "expected a dict"),
        ({"tf": True}, "not True"),
    ],
)
def test_simulated_devices_rule(value, message):
    with pytest.raises(ParameterError) as error:
        engines.simulated_devices_rule(CPU)("simulated_devices", value)
    assert str(error.value).startswith(f"Invalid parameter simulated_devices={value!r}: ")
    assert message in str(error.value)


def test_an_engine_that_is_not_installed_is_skipped_not_refused():
    default = {"tf": 8, "jax": 8}  # the notebook's default must work on Colab's TPU runtime
    assert engines.simulated_devices_rule(COLAB_TPU)("simulated_devices", default) == default
    plan = engines.choose(runtime(("jax",)), simulated=default)  # JAX only, no TPU
    assert (plan.tf, plan.jax, plan.jax_devices) == (None, "cpu", 8)
    assert "TensorFlow not installed: skipped" in plan.reason


def test_inspecting_a_runtime_without_tensorflow_never_imports_it(monkeypatch):
    def no_tf():
        raise AssertionError("TensorFlow must not be touched on a runtime without it")

    monkeypatch.setattr(devices, "detect_tpu", no_tf)
    monkeypatch.setattr(devices, "list_gpus", no_tf)
    found = engines.inspect_runtime(has_module=lambda n: n in ("jax", "libtpu"),
                                    tpu_hardware=lambda: True)
    assert (found.tensorflow, found.jax_tpu, found.gpus) == (False, True, 0)
    assert found.tpu_message == "TensorFlow is not installed on this runtime"


def test_verdict_names_what_this_runtime_can_run():
    tf_tpu = devices.verdict([], TPUStatus(True, resolver="r"), jax_tpu=True)
    assert tf_tpu.kind == "tpu" and "TensorFlow" in tf_tpu.headline
    jax_only = devices.verdict([], TPUStatus(True, message="no TF TPU support"), jax_tpu=True)
    assert "Keras on JAX" in jax_only.headline and "notebook 05" in jax_only.advice.lower()
    neither = devices.verdict([], TPUStatus(True, message="no TF TPU support"), jax_tpu=False)
    assert "neither TensorFlow nor JAX" in neither.headline and "jax[tpu]" in neither.advice
    assert devices.verdict([], TPUStatus(False), jax_tpu=False).kind == "cpu"
