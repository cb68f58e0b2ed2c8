import pytest

from helpers import devices
from helpers.devices import GPU, TPUStatus


@pytest.fixture
def no_devices(monkeypatch):
    """No TPU device files on this machine (TPU hardware is then told by the environment)."""
    monkeypatch.setattr(devices.glob, "glob", lambda pattern: [])


def tpu_support(monkeypatch, installed: bool):
    """Whether tensorflow-tpu is installed, as detect_tpu sees it (Kaggle's tensorflow-cpu not)."""
    monkeypatch.setattr(devices, "_version", lambda *names: "tensorflow-tpu 2.20.0"
                        if installed and names == ("tensorflow-tpu",) else None)


def test_tpu_hardware_hints(no_devices, monkeypatch):
    assert not devices.tpu_hardware_present({})
    assert devices.tpu_hardware_present({"TPU_NAME": "t1"})
    monkeypatch.setattr(devices.glob, "glob", lambda p: ["/dev/accel0"] if "accel" in p else [])
    assert devices.tpu_hardware_present({})


def test_no_tpu_hardware_is_no_tpu_whatever_is_installed(no_devices, monkeypatch):
    tpu_support(monkeypatch, True)
    status = devices.detect_tpu({})
    assert not status.hardware and not status.usable


def test_a_tpu_with_tensorflow_tpu_is_usable(no_devices, monkeypatch):
    tpu_support(monkeypatch, True)
    status = devices.detect_tpu({"TPU_NAME": "local"})
    assert status.hardware and status.usable and "tensorflow-tpu" in status.message


@pytest.mark.parametrize("environ", [{"COLAB_TPU_ADDR": "x"},  # Colab: no TensorFlow
                                     {"TPU_NAME": "x", "KAGGLE_KERNEL_RUN_TYPE": "Interactive"}])
def test_a_tpu_without_tensorflow_tpu_says_what_to_install(no_devices, monkeypatch, environ):
    tpu_support(monkeypatch, False)  # Kaggle's tensorflow-cpu cannot drive its TPU
    status = devices.detect_tpu(environ)
    assert status.hardware and not status.usable
    assert "tensorflow-tpu" in status.message and "restart" in status.message


def test_verdicts():
    t4 = GPU(0, "Tesla T4", "7.5", 15360)
    assert devices.verdict([], TPUStatus(True, usable=True)).startswith("TPU: ready")
    headline, advice = devices.verdict([t4], TPUStatus(False)).split("\n")
    assert headline.startswith("GPU: Tesla T4") and "15.0 GiB" in headline and "02" in advice
    headline, advice = devices.verdict([], TPUStatus(False), platform="colab").split("\n")
    assert headline.startswith("CPU only") and "Runtime > Change runtime type" in advice
    assert "Accelerator" in devices.verdict([], TPUStatus(False), platform="kaggle")
    hidden = devices.verdict([], TPUStatus(False), smi=[{"name": "Tesla T4"}])
    assert hidden.startswith("CPU only: nvidia-smi sees Tesla T4")


def test_the_gpus_tensorflow_sees(tf):
    physical = tf.config.list_physical_devices("GPU")
    gpus = devices.list_gpus(smi=[])
    assert len(gpus) == len(physical) and [g.index for g in gpus] == list(range(len(physical)))


def test_device_names_place_ops_where_they_say(tf):
    with tf.device(devices.device_name("cpu")):
        assert tf.matmul(tf.ones((2, 2)), tf.ones((2, 2))).device.endswith("CPU:0")
    if tf.config.list_physical_devices("GPU"):  # the GPU branch, where there is one
        with tf.device(devices.device_name("gpu")):
            assert tf.matmul(tf.ones((2, 2)), tf.ones((2, 2))).device.endswith("GPU:0")


def test_announce_prints_outside_ipython(capsys):
    devices.announce("cpu", "CPU (2 cores)")
    assert capsys.readouterr().out.strip() == "Running on: CPU (2 cores)"


def test_available_kinds_and_tpu_name(monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v3-8")
    kinds = devices.available_kinds([GPU(0, "Tesla T4")], TPUStatus(True, usable=True))
    assert kinds == {"cpu": kinds["cpu"], "gpu": "Tesla T4", "tpu": "TPU v3"}
    assert devices.available_kinds([], TPUStatus(False)).keys() == {"cpu"}
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE")
    assert devices.available_kinds([], TPUStatus(True, True))["tpu"] == "TPU (generation unknown)"


def _installed(**versions):
    """A stand-in for ``helpers.devices._version``: the first of the names that is "installed"."""
    def version(*names):
        for name in names:
            if name in versions:
                return f"{name} {versions[name]}"
        return None
    return version


def engines(monkeypatch, version, hardware: bool, gpus: int):
    """``engines_here`` by name, on a machine with a TPU (``hardware``) or ``gpus`` GPUs."""
    monkeypatch.setattr(devices, "tpu_hardware_present", lambda: hardware)
    monkeypatch.setattr(devices, "nvidia_smi", lambda: [{}] * gpus)
    return {row[0]: row for row in devices.engines_here(version)}


def test_engines_on_colabs_tpu_runtime_name_08_and_09_and_no_tensorflow(monkeypatch):
    colab_tpu = _installed(jax="0.7.2", keras="3.13.2", libtpu="0.0.21",
                           **{"torch_xla": "2.9.0"})
    rows = engines(monkeypatch, colab_tpu, hardware=True, gpus=0)
    assert rows["TensorFlow"][1:] == ["not installed", "", ""]
    assert rows["Keras 3 on JAX"][2] == "TPU: yes" and rows["Keras 3 on JAX"][3] == "09"
    assert rows["PyTorch/XLA"][2] == "TPU: yes" and rows["PyTorch/XLA"][3] == "10"


def test_engines_on_kaggles_tpu_runtime_say_its_tensorflow_cannot_use_the_tpu(monkeypatch):
    kaggle_tpu = _installed(**{"tensorflow-cpu": "2.20.0", "jax": "0.7.2", "keras": "3.13.2",
                               "libtpu": "0.0.21", "torch_xla": "2.9.0"})
    rows = engines(monkeypatch, kaggle_tpu, hardware=True, gpus=0)
    assert rows["TensorFlow"][2].startswith("TPU: no: no tensorflow-tpu here")
    assert rows["Keras 3 on JAX"][2] == "TPU: yes"


def test_engines_on_a_gpu_runtime_and_on_a_cpu(monkeypatch):
    colab_gpu = _installed(tensorflow="2.20.0", jax="0.7.2", keras="3.13.2",
                           **{"jax-cuda12-plugin": "0.7.2"})
    rows = engines(monkeypatch, colab_gpu, hardware=False, gpus=1)
    assert rows["TensorFlow"][2].startswith("GPU: yes") and rows["TensorFlow"][3] == "01-08"
    assert rows["Keras 3 on JAX"][2] == "GPU: yes"
    assert rows["PyTorch/XLA"][1] == "not installed"
    laptop = _installed(**{"tensorflow-cpu": "2.21.0"})
    rows = engines(monkeypatch, laptop, hardware=False, gpus=0)
    assert rows["TensorFlow"][2] == "no accelerator here: the CPU"


def test_the_verdict_on_a_tpu_only_jax_can_drive_names_08_and_09(monkeypatch):
    tpu = devices.TPUStatus(hardware=True, message="TensorFlow is not installed")
    monkeypatch.setattr(devices, "_installed", lambda name: name in ("jax", "libtpu"))
    headline, advice = devices.verdict([], tpu, "colab").split("\n")
    assert "Notebook 09" in advice and "notebook 10" in advice
    assert headline.startswith("TPU for JAX")  # found so
    monkeypatch.setattr(devices, "_installed", lambda name: name == "jax")  # no libtpu
    assert devices.verdict([], tpu, "colab").startswith("CPU only: a TPU is attached")
