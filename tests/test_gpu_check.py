"""The prepared GPU check: its launcher from a bare python3, its GPU branch with a fake
nvidia-smi, its budget, its report, and how it reads what its stages leave."""

import json
import os
import subprocess
import time
import venv

import pytest

from tools import gpu_check
from tools.gpu_check import Check, Stage

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def a_check(mode="gpu"):
    check = Check(
        when="2026-12-01 10:00 UTC",
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
            "notebook": "07_out_of_memory",
            "status": "failed",
            "seconds": 40.0,
            "device": "GPU: NVIDIA H200",
            "error": "ZeroDivisionError: float division | by zero",
        },
    ]
    check.bench = [
        {
            "name": "matmul_roofline_bfloat16_4096",
            "device": "NVIDIA H200",
            "metric": "median TFLOP/s, bfloat16 4096x4096",
            "value": 610.0,
            "unit": "TFLOP/s",
            "baseline": "published peak",
            "baseline_value": 989.0,
            "ratio": 0.6168,
        },
        {
            "name": "matmul_roofline_bfloat16_1024",
            "device": "NVIDIA H200",
            "metric": "median TFLOP/s, bfloat16 1024x1024",
            "value": 200.0,
            "unit": "TFLOP/s",
            "baseline": "published peak",
            "baseline_value": 989.0,
            "ratio": 0.2022,
        },
        {
            "name": "dcgan_vs_tutorial",
            "device": "NVIDIA H200",
            "metric": "images/s",
            "value": 51234.5,
            "unit": "images/s",
            "baseline": "TF tutorial step",
            "baseline_value": 10000.0,
            "ratio": 5.12345,
        },
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
    # what the device does comes first: the DCGAN step against the tutorial's, and the best
    # matmul per dtype against the published peak
    assert text.index("## What this device does") < text.index("## Stages")
    assert (
        "- DCGAN step on NVIDIA H200: 51,234 images/s" in text and "5.12x the TF tutorial's" in text
    )
    assert (
        "- matmul on NVIDIA H200, bfloat16: 610.0 TFLOP/s at 4096x4096, 62% of the published "
        "peak (989 TFLOP/s)" in text
    )
    assert "200.0 TFLOP/s" not in text.split("## Stages")[0]


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


# -- the launcher, from a python3 with the standard library only ---------------------------------

NO_GPU_SMI = "#!/bin/sh\necho 'No devices were found'\nexit 6\n"
H200_SMI = "#!/bin/sh\necho 'NVIDIA H200, 580.159.04, 143771'\n"
#: Prints the top-level modules the launcher imported beyond the standard library's.
IMPORTED = """
import json, sys
from tools import gpu_check
code = gpu_check.main(sys.argv[1:])
outside = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"__main__"}
print(json.dumps({"code": code, "outside": sorted(outside)}))
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A python3 with the standard library only, as on a fresh machine: an empty venv (no pip,
    nor this environment's packages) of the interpreter these tests run on."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(folder, with_pip=False)
    python = folder / "bin" / "python"
    found = subprocess.run([python, "-c", "import numpy"], capture_output=True, text=True)
    assert found.returncode != 0, "the bare python imports numpy: it is not bare"
    return python


def launched(command: list, smi: str, out) -> tuple[str, dict]:
    """Run ``command`` in the repository where ``nvidia-smi`` prints what ``smi`` says: what it
    printed, and the report it wrote in ``out``."""
    fake = out.parent / "bin"  # first on PATH
    fake.mkdir(exist_ok=True)
    (fake / "nvidia-smi").write_text(smi)
    (fake / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    done = subprocess.run([str(c) for c in command], cwd=gpu_check.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads((out / "report.json").read_text())


def test_the_gpu_branch_runs_from_a_bare_python_up_to_what_needs_the_hardware(
    bare_python, tmp_path
):
    """A fake nvidia-smi lists one GPU: the launcher, from a python3 with nothing installed,
    plans .venv-gpu with the CUDA build and every stage it would run, and writes the report;
    --dry-run installs and runs nothing. It imports nothing beyond the standard library."""
    out = tmp_path / "out"
    said, report = launched([bare_python, "-c", IMPORTED, "--dry-run", "--out", out], H200_SMI, out)
    facts = json.loads(said.strip().splitlines()[-1])
    assert facts == {"code": 0, "outside": ["tools"]}, facts
    assert "GPU check: NVIDIA H200 (driver 580.159.04, 143771 MiB)" in said
    assert report["mode"] == "gpu" and report["environment"] == ".venv-gpu"
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["environment", "probe", "bench", "notebooks", "unit tests"]
    assert {s["status"] for s in stages.values()} == {"planned"}
    plan = stages["environment"]["detail"]
    assert f"{bare_python} -m venv {gpu_check.GPU_VENV}" in plan and "uv pip install" in plan
    pins = (out / "requirements-gpu.txt").read_text()
    assert "\ntensorflow[and-cuda]==" in pins and "\ntensorflow-cpu" not in pins
    assert "--only matmul dcgan" in stages["bench"]["detail"]
    pinned = [p.stem for p in gpu_check.course.stack_notebooks("pinned")]
    assert [n["notebook"] for n in report["notebooks"]] == pinned
    for name in pinned:
        assert f"--child notebook {name} " in stages["notebooks"]["detail"]
    assert "not notebooks and not site and not tpu and not bench" in stages["unit tests"]["detail"]
    assert not (gpu_check.GPU_VENV / ".installed").exists() or "up to date" in plan
    assert (out / "report.md").read_text().rstrip().endswith("nothing installed or run.")


@pytest.mark.bench  # minutes: make bench-test, which CI runs after make test
def test_make_gpu_check_on_a_cpu_from_a_bare_python(bare_python, tmp_path):
    """The way a fresh machine runs it: `make gpu-check` with a python3 that has no course
    packages (nvidia-smi answers that it finds no GPU, as it may on a GPU machine with no
    driver): exit 0, the CPU-safe parts run in .venv, and the report written."""
    out = tmp_path / "out"
    make = ["make", "--no-print-directory", "gpu-check", f"PYTHON={bare_python}"]
    said, report = launched([*make, f"GPU_CHECK_ARGS=--out {out}"], NO_GPU_SMI, out)
    assert "GPU check: no GPU" in said
    assert report["mode"] == "cpu" and report["environment"] == ".venv"
    assert [(s["name"], s["status"]) for s in report["stages"]] == [
        ("environment", "passed"),
        ("probe", "passed"),
        ("bench", "passed"),
        ("notebooks", "passed"),
        ("unit tests", "passed"),
    ]
    assert report["runtime"]["tensorflow"] and report["tests"]["passed"] > 0
    assert [n["notebook"] for n in report["notebooks"]] == gpu_check.CPU_NOTEBOOKS
    assert any(r["name"] == "matmul_fp32_vs_numpy" for r in report["bench"])
    assert (out / "report.md").read_text().rstrip().endswith("Result: all stages passed.")


def test_the_budget_stops_a_command_with_its_children_and_starts_no_other(tmp_path):
    run = gpu_check.Runner(tmp_path, 2, dry_run=False, last_start_s=1)
    marker = tmp_path / "grandchild.pid"
    status, output, seconds = run(
        ["sh", "-c", f"sleep 60 & echo $! > {marker}; echo started; wait"], "slow"
    )
    assert status == "stopped" and seconds < 8
    assert "started" in output and "[stopped by the budget after" in output
    grandchild = int(marker.read_text())
    time.sleep(0.2)
    assert not _alive(grandchild), "the budget left the command's child running"
    assert run(["true"], "next") == ("not run", "", 0.0)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().rpartition(") ")[2].startswith("Z")
    except FileNotFoundError:
        return False


def test_a_failed_command_fails_its_stage_and_the_check(tmp_path):
    run = gpu_check.Runner(tmp_path, 60, dry_run=False)
    check = gpu_check.Check("now", "cpu", gpu_check.NO_GPU)
    gpu_check.probe("false", run, check)
    assert check.stages[-1].status == "failed" and not check.ok
    assert "Result: some stages FAILED." in gpu_check.report_markdown(check)
