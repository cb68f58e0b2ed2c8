import pytest

from helpers import devices, errors, runtime_check
from helpers.devices import GPU, TPUStatus
from helpers.params import ParameterError

NO_TPU = TPUStatus(False)


def test_auto_on_this_cpu_picks_the_cpu():
    choice = devices.choose_device("auto", gpus=[])
    assert choice.kind == "cpu"
    assert choice.description.startswith("CPU (")


def test_auto_picks_the_first_gpu_and_says_so():
    choice = devices.choose_device("auto", gpus=[GPU(0, "Tesla T4"), GPU(1, "Tesla T4")])
    assert choice == ("gpu", "GPU Tesla T4 (the first of 2)")
    assert devices.choose_device("gpu", gpus=[GPU(0, "L4")]) == ("gpu", "GPU L4")


def test_forced_cpu_even_with_a_gpu_listed():
    choice = devices.choose_device("cpu", gpus=[GPU(0, "Tesla T4")])
    assert choice.kind == "cpu"


def test_missing_gpu_is_refused_not_faked():
    with pytest.raises(errors.AcceleratorUnavailable, match="gpu"):
        devices.choose_device("gpu", gpus=[])


@pytest.mark.parametrize("wanted", ["warp", "tpu"])  # a TPU: notebook 06's own TPUStrategy cell
def test_unknown_accelerator(wanted):
    with pytest.raises(ValueError, match=f"'{wanted}': allowed values are 'auto', 'cpu', 'gpu'"):
        devices.choose_device(wanted)


def test_accelerator_rule_lists_what_this_runtime_has():
    rule = devices.accelerator_rule(tpu=NO_TPU, gpus=[])
    assert rule("accelerator", "auto") == "auto"
    with pytest.raises(ParameterError) as error:
        rule("accelerator", "tpu")
    assert str(error.value) == (
        "Invalid parameter accelerator='tpu': this runtime has no TPU; allowed here: 'auto', 'cpu'."
    )
    with pytest.raises(ParameterError, match="allowed values are"):
        rule("accelerator", "warp")
    with_gpu = devices.accelerator_rule(tpu=NO_TPU, gpus=[GPU(0, "T4")])
    assert with_gpu("accelerator", "gpu") == "gpu"


# Logical devices are fixed once per process: these test them in a new one (fresh_process).
def test_splitting_after_start_gives_a_clear_message(fresh_process):
    done = fresh_process("""
        from helpers.logs import import_tensorflow
        from helpers.errors import LateConfigurationError
        from helpers.devices import split_devices
        tf = import_tensorflow()
        tf.constant(1.0) + 1  # the first op starts the devices
        split_devices(1)  # what is in force is fine: no error
        try:
            split_devices(4)
        except LateConfigurationError as error:
            print(error)
    """, timeout=120)
    assert done.returncode == 0, done.output[-2000:]
    assert "Asked for 4 logical CPU device(s), but TensorFlow already started with 1" in done.output
    assert "Restart the kernel" in done.output



def test_notebook_01_takes_no_tpu_even_where_tensorflow_reaches_one(monkeypatch):
    """01's choose_device picks a GPU or the CPU; a TPU is notebook 06's own TPUStrategy cell."""
    monkeypatch.setattr(devices, "detect_tpu", lambda: TPUStatus(True, usable=True))
    monkeypatch.setattr(devices, "list_gpus", lambda: [])
    with pytest.raises(ParameterError, match="'tpu': allowed values are 'auto', 'cpu', 'gpu'"):
        runtime_check.check_parameters(accelerator="tpu", matmul_size=256, dataset="mnist",
                                       sample_images=4)
    assert devices.accelerator_rule()("accelerator", "tpu") == "tpu"  # 06's rule takes it here
