"""The prepared GPU check: its report, and how it reads what its stages leave."""

import json

import pytest

from tools import gpu_check
from tools.gpu_check import Check, Stage

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def a_check(mode="gpu"):
    check = Check(
        when="2026-12-01 09:00 UTC",
        mode=mode,
        device="NVIDIA H200 (driver 560.35.03, 143771 MiB)" if mode == "gpu" else gpu_check.NO_GPU,
        environment=".venv-gpu" if mode == "gpu" else ".venv",
        runtime={
            "tensorflow": "2.21.0",
            "cuda_build": mode == "gpu",
            "cuda": "12.5.1",
            "cudnn": "9",
            "gpus": ["NVIDIA H200, compute 9.0"] if mode == "gpu" else [],
        },
    )
    check.stages = [Stage("environment", "passed", 95.04), Stage("unit tests", "passed", 80.0)]
    check.tests = {"passed": 120, "failed": 0, "skipped": 2, "failures": []}
    check.notebooks = [
        {
            "notebook": "01_runtime_check",
            "status": "passed",
            "seconds": 21.34,
            "device": "GPU: NVIDIA H200",
            "error": "",
        },
        {
            "notebook": "06_out_of_memory",
            "status": "failed",
            "seconds": 40.0,
            "device": "GPU: NVIDIA H200",
            "error": "ZeroDivisionError: float division | by zero",
        },
    ]
    check.bench = [
        {
            "name": "dcgan_vs_tutorial",
            "device": "NVIDIA H200",
            "metric": "images/s",
            "value": 51234.5,
            "unit": "images/s",
            "baseline": "TF tutorial step",
            "baseline_value": 10000.0,
            "ratio": 5.12345,
        }
    ]
    return check


def test_the_report_names_the_device_each_notebook_and_the_ratios():
    text = gpu_check.report_markdown(a_check())
    assert "Device: NVIDIA H200 (driver 560.35.03, 143771 MiB)" in text
    assert "TensorFlow 2.21.0 (CUDA 12.5.1, cuDNN 9); GPUs it sees: NVIDIA H200" in text
    assert "| 01_runtime_check | passed | 21.3 | GPU: NVIDIA H200 |  |" in text
    assert "float division \\| by zero" in text  # a pipe in an error keeps the table whole
    assert "| dcgan_vs_tutorial | NVIDIA H200 | images/s | 5.123e+04 | images/s |" in text
    assert "| 5.123 |" in text
    assert "120 passed, 0 failed, 2 skipped." in text
    assert text.rstrip().endswith("Result: all stages passed.")


def test_a_cpu_report_says_no_gpu_and_a_failed_stage_says_so():
    check = a_check("cpu")
    check.stages.append(Stage("bench", "failed", 3.0, "tools.bench (light): 0 records"))
    text = gpu_check.report_markdown(check)
    assert f"Device: **{gpu_check.NO_GPU}**." in text and "CPU-only build" in text
    assert "GPUs it sees: none" in text
    assert "| bench | failed | 3.0 | tools.bench (light): 0 records |" in text
    assert not check.ok and "Result: some stages FAILED." in text


def test_write_report_leaves_markdown_and_json(tmp_path):
    path = gpu_check.write_report(a_check(), tmp_path / "out")
    assert path == tmp_path / "out" / "report.md" and path.read_text().startswith("# GPU check")
    facts = json.loads((tmp_path / "out" / "report.json").read_text())
    assert facts["mode"] == "gpu" and facts["stages"][0]["name"] == "environment"


def test_the_gpu_environment_swaps_only_the_tensorflow_build():
    text = "# pins\ntensorflow-cpu==2.21.0\nkeras==3.15.1\n"
    assert (
        gpu_check.gpu_requirements(text) == "# pins\ntensorflow[and-cuda]==2.21.0\nkeras==3.15.1\n"
    )
    with pytest.raises(ValueError, match="tensorflow-cpu"):
        gpu_check.gpu_requirements("tensorflow==2.21.0\n")
    real = (gpu_check.ROOT / "requirements.txt").read_text()
    assert "tensorflow[and-cuda]==" in gpu_check.gpu_requirements(real)


def test_junit_counts_and_the_last_json_line(tmp_path):
    xml = tmp_path / "unit.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_ok"/>'
        '<testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>'
        '<testcase classname="tests.test_b" name="test_err"><error message="y"/></testcase>'
        '<testcase classname="tests.test_b" name="test_skip"><skipped message="z"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert gpu_check.junit_counts(xml) == {
        "passed": 1,
        "failed": 2,
        "skipped": 1,
        "failures": ["tests.test_a::test_bad", "tests.test_b::test_err"],
    }
    assert gpu_check.last_json_line('noise\n{"a": 1}\n{broken\n') == {"a": 1}
    assert gpu_check.last_json_line("nothing here") is None
