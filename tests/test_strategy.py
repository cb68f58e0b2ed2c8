import pytest

from helpers import devices, errors
from helpers.devices import GPU, TPUStatus
from helpers.params import ParameterError

NO_TPU = TPUStatus(False)


def test_auto_on_this_cpu_picks_one_cpu_device(tf):
    choice = devices.choose_strategy("auto", tpu=NO_TPU, gpus=[])
    assert choice.kind == "cpu" and choice.replicas == 1
    assert isinstance(choice.strategy, tf.distribute.OneDeviceStrategy)
    assert choice.description.startswith("CPU")


def test_forced_cpu_even_with_a_gpu_listed(tf):
    choice = devices.choose_strategy("cpu", tpu=NO_TPU, gpus=[GPU(0, "Tesla T4")])
    assert choice.kind == "cpu"


@pytest.mark.parametrize("wanted", ["gpu", "tpu"])
def test_missing_accelerator_is_refused_not_faked(tf, wanted):
    with pytest.raises(errors.AcceleratorUnavailable, match=wanted):
        devices.choose_strategy(wanted, tpu=NO_TPU, gpus=[])


def test_unknown_accelerator(tf):
    with pytest.raises(ValueError, match="'warp'"):
        devices.choose_strategy("warp")


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


def test_the_tpu_system_is_initialised_once_per_process(tf, monkeypatch):
    """A second "Run all" must not run initialize_tpu_system again: that wipes the TPU's
    memory, and with it every variable the first run made."""
    calls = []

    class FakeResolver:
        def master(self):
            return "grpc://fake-tpu:8470"

    class FakeTPUStrategy:
        num_replicas_in_sync = 8

        def __init__(self, resolver):
            calls.append("strategy")

    monkeypatch.setattr(devices, "_TPU", [])
    monkeypatch.setattr(
        tf.config, "experimental_connect_to_cluster", lambda r: calls.append("connect")
    )
    monkeypatch.setattr(
        tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append("initialise")
    )
    monkeypatch.setattr(tf.distribute, "TPUStrategy", FakeTPUStrategy)
    tpu = TPUStatus(True, FakeResolver())
    first = devices.choose_strategy("auto", tpu=tpu, gpus=[])
    again = devices.choose_strategy("tpu", tpu=TPUStatus(True, FakeResolver()), gpus=[])
    assert first.kind == again.kind == "tpu" and again.replicas == 8
    assert again.strategy is first.strategy  # the variables made under it stay valid
    assert calls == ["connect", "initialise", "strategy"]
