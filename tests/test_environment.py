import subprocess

from helpers import devices

SMI = "Tesla T4, 550.54.15, 15360, 3\nNVIDIA H200, 560.35.03, 143771, 0\n"


def test_platform_detection(monkeypatch):
    monkeypatch.setattr(devices, "_installed", lambda name: False)
    assert devices.detect_platform({"COLAB_RELEASE_TAG": "x"}) == "colab"
    assert devices.detect_platform({"KAGGLE_KERNEL_RUN_TYPE": "i"}) == "kaggle"
    assert devices.detect_platform({"HOME": "/root"}) == "local"
    monkeypatch.setattr(devices, "_installed", lambda name: name == "google.colab")
    assert devices.detect_platform({}) == "colab"


def test_a_module_whose_parent_is_missing_is_not_installed():
    assert devices._installed("json") and not devices._installed("no_such_package.colab")


def test_nvidia_smi_absent_failing_and_present():
    def run_ok(cmd, **kw):
        assert cmd[0] == "nvidia-smi" and "--format=csv,noheader,nounits" in cmd
        return subprocess.CompletedProcess(cmd, 0, stdout=SMI + "garbage line\n", stderr="")

    def run_fail(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 9, stdout="", stderr="driver mismatch")

    def run_hang(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, 20)

    found = lambda name: "/usr/bin/" + name  # noqa: E731
    assert devices.nvidia_smi(run_ok, which=lambda name: None) == []
    assert devices.nvidia_smi(run_fail, which=found) == []
    assert devices.nvidia_smi(run_hang, which=found) == []
    gpus = devices.nvidia_smi(run_ok, which=found)
    assert [g["name"] for g in gpus] == ["Tesla T4", "NVIDIA H200"]  # the garbage line skipped
    assert gpus[0] == {"name": "Tesla T4", "driver": "550.54.15", "memory_total_mib": 15360,
                       "memory_used_mib": 3}
