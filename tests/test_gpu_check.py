"""The prepared GPU check: its launcher from a bare python3, its GPU branch with a fake
nvidia-smi, its budget, its report, and how it reads what its stages leave."""

import http.server
import json
import os
import subprocess
import threading
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


@pytest.fixture(scope="module")
def index():
    """A package index that answers (a HEAD request, on this machine): the network is there,
    and the tests still touch none."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


NO_INDEX = "http://127.0.0.1:9/simple/"  # the discard port: nothing answers
TPU_PYTHON = gpu_check.ROOT / ".venv-tpu" / "bin" / "python"  # JAX and Keras, no TensorFlow


def launched(command: list, smi: str, out, index: str) -> tuple[str, dict]:
    """Run ``command`` in the repository where ``nvidia-smi`` prints what ``smi`` says and pip's
    index is ``index``: what it printed, and the report it wrote in ``out``."""
    fake = out.parent / "bin"  # first on PATH
    fake.mkdir(exist_ok=True)
    (fake / "nvidia-smi").write_text(smi)
    (fake / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["PATH"], env["PIP_INDEX_URL"] = f"{fake}{os.pathsep}{env['PATH']}", index
    done = subprocess.run([str(c) for c in command], cwd=gpu_check.ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads((out / "report.json").read_text())


def test_the_gpu_branch_runs_from_a_bare_python_up_to_what_needs_the_hardware(
    bare_python, tmp_path, index
):
    """A fake nvidia-smi lists one GPU: the launcher, from a python3 with nothing installed,
    plans .venv-gpu with the CUDA build and every stage it would run, and writes the report;
    --dry-run installs and runs nothing. It imports nothing beyond the standard library."""
    out = tmp_path / "out"
    said, report = launched([bare_python, "-c", IMPORTED, "--dry-run", "--out", out], H200_SMI, out,
                            index)
    facts = json.loads(said.strip().splitlines()[-1])
    assert facts == {"code": 0, "outside": ["tools"]}, facts
    assert "GPU check: NVIDIA H200 (driver 580.159.04, 143771 MiB)" in said
    assert report["mode"] == "gpu" and report["environment"] == ".venv-gpu"
    assert not report["not_run"]  # the index answers: TensorFlow's CUDA build can be installed
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["environment", "probe", "bench", "notebooks", "unit tests"]
    assert {s["status"] for s in stages.values()} == {"planned"}
    plan = stages["environment"]["detail"]
    assert f"{bare_python} -m venv {gpu_check.GPU_VENV}" in plan and "uv pip install" in plan
    pins = (out / "requirements-gpu.txt").read_text()  # only the TensorFlow build swapped
    real = (gpu_check.ROOT / "requirements.txt").read_text()
    assert pins == real.replace("\ntensorflow-cpu==", "\ntensorflow[and-cuda]==") != real
    assert "--only matmul dcgan" in stages["bench"]["detail"]
    pinned = [p.stem for p in gpu_check.course.stack_notebooks("pinned")]
    assert [n["notebook"] for n in report["notebooks"]] == pinned
    for name in pinned:
        assert f"--child notebook {name} " in stages["notebooks"]["detail"]
    assert "not notebooks and not site and not tpu and not bench" in stages["unit tests"]["detail"]
    assert (out / "report.md").read_text().rstrip().endswith("nothing installed or run.")


@pytest.mark.bench  # minutes: make bench-test, which CI runs after make test
def test_make_gpu_check_on_a_cpu_from_a_bare_python(bare_python, tmp_path, index):
    """The way a fresh machine runs it: `make gpu-check` with a python3 that has no course
    packages (nvidia-smi answers that it finds no GPU, as it may on a GPU machine with no
    driver): exit 0, the CPU-safe parts run in .venv, and the report written."""
    out = tmp_path / "out"
    make = ["make", "--no-print-directory", "gpu-check", f"PYTHON={bare_python}"]
    said, report = launched([*make, f"GPU_CHECK_ARGS=--out {out}"], NO_GPU_SMI, out, index)
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


# -- without TensorFlow: an image with JAX, no TensorFlow and no network -----------------------

#: What `make gpu-wheels` brings; the test's folder names the versions .venv-tpu has, so that
#: it installs from the folder alone with nothing in it
BROUGHT = ["keras", "ipykernel", "ipywidgets", "nbformat", "papermill", "nbval"]


@pytest.fixture
def wheels(tmp_path):
    """A wheels folder as `make gpu-wheels` leaves it, for the TPU stack's Python."""
    if not TPU_PYTHON.exists():
        pytest.skip("needs .venv-tpu (make venv-tpu): a Python with JAX and no TensorFlow")
    code = ("import sys; from importlib.metadata import version; print(f'# python: "
            "{sys.version_info[0]}.{sys.version_info[1]}'); "
            "[print(f'{n}=={version(n)}') for n in sys.argv[1:]]")
    pins = subprocess.run([TPU_PYTHON, "-c", code, *BROUGHT], capture_output=True, text=True,
                          check=True).stdout
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "requirements.txt").write_text(pins)
    return folder


def test_without_tensorflow_or_a_network_it_plans_09_on_the_image_jax(tmp_path, wheels):
    """A fake GPU, a Python with JAX and no TensorFlow, and an index that does not answer: it
    chooses by itself to run 09 and the DCGAN step in PyTorch on CUDA in a venv on that Python's
    packages, installing from the wheels folder only, and names what needs TensorFlow as not run,
    and why."""
    out = tmp_path / "out"
    command = [TPU_PYTHON, "-m", "tools.gpu_check", "--dry-run", "--out", out, "--wheels", wheels]
    said, report = launched(command, H200_SMI, out, NO_INDEX)
    assert f"without TensorFlow: {gpu_check.NO_TF}" in said
    assert report["mode"] == "gpu" and report["environment"] == str(out / "venv")
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == ["environment", "probe", "bench", "notebooks"]
    plan = stages["environment"]["detail"]
    assert f"-m venv --clear --without-pip --system-site-packages {out / 'venv'}" in plan
    assert f"install -q --no-index --find-links {wheels} -r {wheels / 'requirements.txt'}" in plan
    venv_python = out / "venv" / "bin" / "python"
    bench = f"{venv_python} -m tools.bench --light --out {out / 'bench'} --only dcgan_cuda"
    assert bench in stages["bench"]["detail"]
    assert [n["notebook"] for n in report["notebooks"]] == gpu_check.IMAGE_NOTEBOOKS
    pinned = [p.stem[:2] for p in gpu_check.course.stack_notebooks("pinned")]
    assert report["not_run"] == {  # the GPU parts are planned: what JAX and torch see is not known
        f"notebooks {', '.join(pinned)}": gpu_check.NO_TF,
        "the unit tests": gpu_check.NO_TF,
        "tools.bench's TensorFlow records": gpu_check.NO_TF,
    }
    text = (out / "report.md").read_text()
    assert text.index("## Not run") < text.index("## Stages")  # said before what ran
    assert (out / "ipython/profile_default/startup/00-jax.py").read_text() == gpu_check.JAX_FIRST


def test_without_tensorflow_wheels_must_be_there(tmp_path):
    check, run = Check("now", "gpu", "an H100"), gpu_check.Runner(tmp_path, 60, dry_run=False)
    gpu_check.environment("gpu", run, check, tmp_path / "none")
    assert check.stages[-1].status == "failed" and not check.ok
    assert "run `make gpu-wheels" in check.stages[-1].detail


@pytest.mark.bench  # about two minutes: make bench-test
def test_make_gpu_check_without_tensorflow_on_a_gpu_that_jax_and_torch_do_not_see(tmp_path, wheels):
    """`make gpu-check` on a Python with JAX and torch and no TensorFlow, asked to go without it,
    where nvidia-smi lists a GPU that neither sees (here: a fake nvidia-smi, and their builds find
    no GPU): exit 0; the report says so at the top in one line, names 09 on the GPU and the DCGAN
    step on CUDA as not run, with why, and runs what can run: the environment from the wheels
    folder without an index, the probe, tools.bench (its record says why not) and 09 on 8
    simulated CPU devices."""
    out = tmp_path / "out"
    args = f"--without-tensorflow --out {out} --wheels {wheels}"
    make = ["make", "--no-print-directory", "gpu-check", f"PYTHON={TPU_PYTHON}"]
    said, report = launched([*make, f"GPU_CHECK_ARGS={args}"], H200_SMI, out, NO_INDEX)
    assert "GPU check: NVIDIA H200" in said and "without TensorFlow: asked" in said
    assert [(s["name"], s["status"]) for s in report["stages"]] == [
        ("environment", "passed"), ("probe", "passed"), ("bench", "passed"),
        ("notebooks", "passed")]
    jax = report["runtime"]["jax"]
    assert report["runtime"]["gpus"] == []  # JAX: no GPU here
    [nb] = report["notebooks"]
    assert (nb["notebook"], nb["status"]) == ("09_tpu_keras_jax", "passed")
    assert nb["device"] == "8 simulated CPU device(s) (no TPU here)"  # never a GPU here
    [record] = report["bench"]
    assert record["name"] == "dcgan_step_pytorch_cuda" and record["value"] is None
    assert record["not_run"].startswith("torch ") and "finds no CUDA device (" in record["not_run"]
    unseen = f"JAX {jax} sees cpu only (likely a CPU-only build)"
    pinned = [p.stem[:2] for p in gpu_check.course.stack_notebooks("pinned")]
    tf_parts = [f"notebooks {', '.join(pinned)}", "the unit tests",
                "tools.bench's TensorFlow records"]
    assert report["not_run"] == {
        **dict.fromkeys(tf_parts, "asked (--without-tensorflow)"),
        "notebook 09 on the GPU": unseen,
        "DCGAN step in PyTorch on CUDA": record["not_run"],
    }
    text = (out / "report.md").read_text()
    top = f"**nvidia-smi lists a GPU, but {unseen}; {record['not_run']}.**"
    assert top in text and text.index(top) < text.index("Device: NVIDIA H200")
    assert f"JAX {jax}; GPUs it sees: none" in text
    assert text.rstrip().endswith("not run: " + ", ".join(report["not_run"]) + ".")
    assert "Result: all stages passed; not run: notebooks 01" in text


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


#: A stand-in for the environment's Python: prints what the probe or tools.bench would
FAKE_PYTHON = """#!/bin/sh
if [ "$2" = tools.bench ]; then mkdir -p "$5"; echo '%s' > "$5/results.json"; else echo '%s'; fi
"""
NO_CUDA = "torch 2.11.0+cpu finds no CUDA device (likely cause: a CPU-only build)"
JAX_CPU = {"jax": "0.9.0", "gpus": [], "unseen": "JAX 0.9.0 sees cpu only (a CPU-only build?)"}


@pytest.mark.parametrize("mode", ["gpu", "cpu"])
def test_without_tensorflow_what_jax_and_torch_do_not_see_is_not_run_and_said_first(
    tmp_path, mode
):
    """The probe and tools.bench answer that JAX and torch see no GPU: where nvidia-smi lists
    one, both stages pass, 09 on the GPU and the DCGAN step on CUDA are named as not run with
    why, and the report says so first, in one line; without a GPU, only the DCGAN step is."""
    record = {"name": "dcgan_step_pytorch_cuda", "value": None, "not_run": NO_CUDA}
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON % (json.dumps([record]), json.dumps(JAX_CPU)))
    python.chmod(0o755)
    run, check = gpu_check.Runner(tmp_path, 60, dry_run=False), Check("now", mode, "an H100")
    gpu_check.probe(python, run, check, "jax")
    gpu_check.bench(python, run, check, ["dcgan_cuda"])
    assert [(s.name, s.status) for s in check.stages] == [("probe", "passed"), ("bench", "passed")]
    expected = {"notebook 09 on the GPU": JAX_CPU["unseen"]} if mode == "gpu" else {}
    assert check.not_run == {**expected, "DCGAN step in PyTorch on CUDA": NO_CUDA} and check.ok
    text = gpu_check.report_markdown(check)
    top = f"**nvidia-smi lists a GPU, but {JAX_CPU['unseen']}; {NO_CUDA}.**"
    assert (top in text and text.index(top) < text.index("Device:")) == (mode == "gpu")


def test_a_gpu_tensorflow_does_not_see_fails_the_probe(tmp_path):
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON % ("[]", json.dumps({"tensorflow": "2.21.0", "gpus": []})))
    python.chmod(0o755)
    check = Check("now", "gpu", "an H100")
    gpu_check.probe(python, gpu_check.Runner(tmp_path, 60, dry_run=False), check)
    assert check.stages[-1].status == "failed" and "it sees none" in check.stages[-1].detail


def test_a_failed_command_fails_its_stage_and_the_check(tmp_path):
    run = gpu_check.Runner(tmp_path, 60, dry_run=False)
    check = gpu_check.Check("now", "cpu", gpu_check.NO_GPU)
    gpu_check.probe("false", run, check)
    assert check.stages[-1].status == "failed" and not check.ok
    assert "Result: some stages FAILED." in gpu_check.report_markdown(check)
