"""The prepared GPU check: the course on an NVIDIA GPU, end to end, with one report.

    python -m tools.gpu_check [--out DIR] [--full] [--jobs N] [--budget-s S]

With an NVIDIA GPU (``nvidia-smi`` lists one) it creates ``.venv-gpu`` from requirements.txt
with ``tensorflow-cpu`` swapped for ``tensorflow[and-cuda]`` at the same version, then runs
the unit tests, every notebook at the ``test`` profile and the benchmarks (``tools.bench
--light``), and writes ``<out>/report.md``: the device, each stage's status and seconds, each
notebook's status, time and device, and the benchmark ratios.

Without one it says "no GPU", installs nothing for CUDA, and runs the CPU-safe parts in the
normal ``.venv``: the unit tests that branch on the device, notebook 01 and the matmul
benchmark (``--full`` runs every part, as on a GPU). It only reads stdlib on its own: the
work runs in the environment's Python. Exit status 1 if a stage failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_VENV = ROOT / ".venv-gpu"
CPU_VENV = ROOT / ".venv"
#: The unit tests whose assertions branch on the device (run on a CPU without --full).
DEVICE_TESTS = [
    "tests/test_environment.py",
    "tests/test_devices.py",
    "tests/test_migrations.py",
    "tests/test_roofline.py",
    "tests/test_logs.py",
]
#: Notebooks run on a CPU without --full.
CPU_NOTEBOOKS = ["01_runtime_check"]
NO_GPU = "no GPU: nvidia-smi lists none, so the CUDA build is not installed"
#: The environment every stage runs with: offline data, no plots on screen, and GPU memory
#: taken as needed (TensorFlow takes almost all of it by default), so that test workers and
#: notebooks run side by side on one GPU.
STAGE_ENV = {"COURSE_OFFLINE": "1", "MPLBACKEND": "Agg", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}

PROBE = """
import json
from helpers.logs import import_tensorflow
tf = import_tensorflow()
from helpers import devices
build = tf.sysconfig.get_build_info()
print(json.dumps({
    "tensorflow": tf.__version__,
    "cuda_build": bool(build.get("is_cuda_build")),
    "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
    "gpus": [g.describe() for g in devices.list_gpus()],
}))
"""

NOTEBOOK = """
import json, sys
from pathlib import Path
from tools import course, run_notebooks
path = course.NOTEBOOKS / (sys.argv[1] + ".ipynb")
r = run_notebooks.execute(path, Path(sys.argv[2]), course.parameters_for(path.stem, "test"))
print(json.dumps({"notebook": r.notebook, "status": r.status, "seconds": r.seconds,
                  "device": r.device, "error": r.error}))
"""


@dataclass
class Stage:
    name: str
    status: str  # "passed", "failed", "skipped"
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Check:
    """Everything the report says."""

    when: str
    mode: str  # "gpu" or "cpu"
    device: str  # the GPU(s) nvidia-smi lists, or NO_GPU
    environment: str = ""  # the virtual environment used
    runtime: dict = field(default_factory=dict)  # what TensorFlow in it says (PROBE)
    stages: list[Stage] = field(default_factory=list)
    tests: dict = field(default_factory=dict)  # passed / failed / skipped / failures
    notebooks: list[dict] = field(default_factory=list)
    bench: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(stage.status != "failed" for stage in self.stages)


# -- the report ---------------------------------------------------------------------------------


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return lines


def report_markdown(check: Check) -> str:
    """The report: device first, then each stage, the tests, the notebooks and the ratios."""
    lines = ["# GPU check", "", f"Run {check.when}, mode: **{check.mode}**.", ""]
    lines.append(f"Device: {check.device}" if check.mode == "gpu" else f"Device: **{NO_GPU}**.")
    if check.environment:
        lines.append(f"Environment: `{check.environment}`")
    if check.runtime:
        rt = check.runtime
        cuda = (
            f"CUDA {rt.get('cuda')}, cuDNN {rt.get('cudnn')}"
            if rt.get("cuda_build")
            else ("CPU-only build")
        )
        gpus = "; ".join(rt.get("gpus") or []) or "none"
        lines.append(f"TensorFlow {rt.get('tensorflow')} ({cuda}); GPUs it sees: {gpus}")
    lines += ["", "## Stages", ""]
    lines += _table(
        ["stage", "status", "seconds", "detail"],
        [[s.name, s.status, f"{s.seconds:.1f}", s.detail] for s in check.stages],
    )
    if check.tests:
        t = check.tests
        lines += [
            "",
            "## Unit tests",
            "",
            f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
            f"{t.get('skipped', 0)} skipped.",
        ]
        lines += [f"- failed: `{name}`" for name in t.get("failures", [])]
    if check.notebooks:
        lines += ["", "## Notebooks (test profile)", ""]
        lines += _table(
            ["notebook", "status", "seconds", "device", "error"],
            [
                [n["notebook"], n["status"], f"{n['seconds']:.1f}", n["device"], n["error"]]
                for n in check.notebooks
            ],
        )
    if check.bench:
        lines += ["", "## Benchmarks", ""]
        lines += _table(
            ["name", "device", "metric", "value", "unit", "baseline", "ratio"],
            [
                [
                    r["name"],
                    r["device"],
                    r["metric"],
                    r["value"],
                    r["unit"],
                    r.get("baseline"),
                    r.get("ratio"),
                ]
                for r in check.bench
            ],
        )
    if check.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in check.notes]
    verdict = "all stages passed" if check.ok else "some stages FAILED"
    return "\n".join(lines + ["", f"Result: {verdict}.", ""])


def write_report(check: Check, out: Path) -> Path:
    """``report.md`` and ``report.json`` (the same facts) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(asdict(check), indent=1) + "\n")
    path = out / "report.md"
    path.write_text(report_markdown(check))
    return path


# -- reading what the stages leave ---------------------------------------------------------------


def gpu_requirements(text: str) -> str:
    """requirements.txt with ``tensorflow-cpu==V`` swapped for ``tensorflow[and-cuda]==V``."""
    pattern = re.compile(r"^tensorflow-cpu\s*==\s*(\S+)\s*$", re.MULTILINE)
    if not pattern.search(text):
        raise ValueError("requirements.txt pins no tensorflow-cpu==<version> to swap")
    return pattern.sub(lambda m: f"tensorflow[and-cuda]=={m.group(1)}", text)


def junit_counts(path: Path) -> dict:
    """passed / failed / skipped and the failing test ids, from pytest's ``--junitxml``."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = {child.tag for child in case}
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if outcome & {"failure", "error"}:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif "skipped" in outcome:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def last_json_line(text: str) -> dict | list | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


# -- running the stages -------------------------------------------------------------------------


def _run(cmd, log: Path, timeout: float, env: dict | None = None) -> tuple[int, str, float]:
    """Run ``cmd`` in the repository with its output in ``log``; (exit code, output, seconds)."""
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [str(c) for c in cmd],
            cwd=ROOT,
            env={**os.environ, **STAGE_ENV, **(env or {})},
            capture_output=True,
            text=True,
            timeout=max(1, timeout),
        )
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as error:  # its output is bytes, whatever text= says
        parts = [
            p.decode(errors="replace") if isinstance(p, bytes) else p or ""
            for p in (error.stdout, error.stderr)
        ]
        code, output = 124, "".join(parts) + f"\n[stopped after {timeout:.0f} s]"
    log.write_text(output)
    return code, output, time.perf_counter() - start


def ensure_environment(mode: str, out: Path) -> tuple[Path, Stage]:
    """``.venv-gpu`` with the CUDA build (reinstalled only when requirements change), or the
    normal ``.venv`` through ``make venv``. Returns its Python and the stage."""
    start = time.perf_counter()
    if mode == "cpu":
        code, output, _ = _run(["make", "venv"], out / "logs" / "environment.log", 1800)
        python = CPU_VENV / "bin" / "python"
        detail = ".venv (CPU TensorFlow, from requirements.txt)"
    else:
        requirements = gpu_requirements((ROOT / "requirements.txt").read_text())
        wanted = hashlib.sha256(
            (requirements + (ROOT / "pyproject.toml").read_text()).encode()
        ).hexdigest()
        stamp = GPU_VENV / ".installed"
        python = GPU_VENV / "bin" / "python"
        code, output = 0, ""
        if not (python.exists() and stamp.exists() and stamp.read_text() == wanted):
            pinned = out / "requirements-gpu.txt"
            pinned.parent.mkdir(parents=True, exist_ok=True)
            pinned.write_text(requirements)
            steps = [
                [sys.executable, "-m", "venv", GPU_VENV],
                [python, "-m", "pip", "install", "-q", "--upgrade", "pip"],
                [python, "-m", "pip", "install", "-q", "-r", pinned],
                [python, "-m", "pip", "install", "-q", "--no-deps", "-e", ROOT],
            ]
            for number, step in enumerate(steps):
                log = out / "logs" / f"environment-{number}.log"
                code, output, _ = _run(step, log, 1800)
                if code:
                    break
            if not code:
                stamp.write_text(wanted)
        detail = ".venv-gpu (tensorflow[and-cuda] at the pinned version)"
    status = "passed" if code == 0 else "failed"
    if code:
        detail += ": " + output.strip().splitlines()[-1][:200] if output.strip() else ""
    return python, Stage("environment", status, time.perf_counter() - start, detail)


def run_probe(python: Path, out: Path, check: Check) -> None:
    code, output, seconds = _run([python, "-c", PROBE], out / "logs" / "probe.log", 300)
    check.runtime = last_json_line(output) or {}
    ok = code == 0 and check.runtime
    if ok and check.mode == "gpu" and not check.runtime.get("gpus"):
        check.notes.append("nvidia-smi lists a GPU but TensorFlow sees none (CUDA mismatch?)")
        ok = False
    detail = f"TensorFlow {check.runtime.get('tensorflow', '?')}" if ok else "see logs/probe.log"
    check.stages.append(Stage("probe", "passed" if ok else "failed", seconds, detail))


def run_unit_tests(python: Path, out: Path, check: Check, full: bool, jobs: int, budget) -> None:
    xml = out / "unit.xml"
    selection = ["-m", "not notebooks"] if full or check.mode == "gpu" else DEVICE_TESTS
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd += ["-n", str(jobs)] if jobs > 1 else []
    code, output, seconds = _run(cmd + selection, out / "logs" / "unit.log", budget())
    check.tests = junit_counts(xml) if xml.exists() else {}
    t = check.tests
    summary = f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed" if t else ""
    status = "passed" if code == 0 else "failed"
    scope = "all unit tests" if selection[0] == "-m" else "the device-dependent unit tests"
    check.stages.append(Stage("unit tests", status, seconds, f"{scope}: {summary}".strip()))


def run_notebooks(python: Path, out: Path, check: Check, names, jobs: int, budget) -> None:
    start = time.perf_counter()
    build = out / "notebooks"
    limit = budget()

    def one(name):
        code, output, seconds = _run(
            [python, "-c", NOTEBOOK, name, build], out / "logs" / f"{name}.log", limit
        )
        found = last_json_line(output)
        if isinstance(found, dict):
            return found
        error = "timed out" if code == 124 else f"runner exited with {code}"
        return {
            "notebook": name,
            "status": "failed",
            "seconds": seconds,
            "device": "?",
            "error": error,
        }

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        check.notebooks = list(pool.map(one, names))
    failed = [n["notebook"] for n in check.notebooks if n["status"] != "passed"]
    detail = f"{len(names) - len(failed)} of {len(names)} passed, {jobs} at a time"
    status = "failed" if failed else "passed"
    check.stages.append(Stage("notebooks", status, time.perf_counter() - start, detail))


def run_bench(python: Path, out: Path, check: Check, only, light: bool, budget) -> None:
    cmd = [python, "-m", "tools.bench", "--out", out / "bench"]
    cmd += ["--light"] if light else []
    cmd += ["--only", *only] if only else []
    code, _, seconds = _run(cmd, out / "logs" / "bench.log", budget())
    results = out / "bench" / "results.json"
    check.bench = json.loads(results.read_text()) if code == 0 and results.exists() else []
    what = ("light" if light else "full") + (f", only {', '.join(only)}" if only else "")
    detail = f"tools.bench ({what}): {len(check.bench)} records"
    check.stages.append(Stage("bench", "passed" if code == 0 else "failed", seconds, detail))


def detect_gpus() -> list[dict]:
    sys.path.insert(0, str(ROOT))
    # stdlib only, no TensorFlow; imported here, where the course's root is on the path
    from helpers.devices import nvidia_smi  # noqa: PLC0415  (this module imports stdlib only)

    return nvidia_smi()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check")
    parser.add_argument("--full", action="store_true", help="on a CPU too: every part")
    parser.add_argument("--jobs", type=int, default=0, help="parallel workers (default: auto)")
    parser.add_argument("--budget-s", type=float, default=480, help="stop stages after this")
    args = parser.parse_args(argv)
    began = time.perf_counter()

    def budget() -> float:  # what is left for the next stage
        return args.budget_s - (time.perf_counter() - began)

    gpus = detect_gpus()
    mode = "gpu" if gpus else "cpu"
    device = "; ".join(
        f"{g['name']} (driver {g['driver']}, {g['memory_total_mib']} MiB)" for g in gpus
    )
    print(f"GPU check: {device}" if gpus else f"GPU check: {NO_GPU}; running the CPU-safe parts")
    check = Check(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), mode, device or NO_GPU)
    jobs = args.jobs or max(1, min(4, (os.cpu_count() or 2) // 4))
    out = args.out.resolve()
    python, stage = ensure_environment(mode, out)
    check.environment = str(python.parent.parent.relative_to(ROOT))
    check.stages.append(stage)
    print(f"  environment: {stage.status} in {stage.seconds:.0f} s", flush=True)
    full = args.full or mode == "gpu"
    if stage.status == "passed":
        from tools.course import stack_notebooks  # noqa: PLC0415  (needs nbformat; see the docstring)

        # the TensorFlow notebooks: 08 and 09 are TPU lessons, run by `make test` on the TPU stack
        names = [p.stem for p in stack_notebooks("pinned")] if full else CPU_NOTEBOOKS
        steps = [
            ("probe", lambda: run_probe(python, out, check)),
            ("unit tests", lambda: run_unit_tests(python, out, check, full, jobs, budget)),
            ("notebooks", lambda: run_notebooks(python, out, check, names, jobs, budget)),
            (
                "bench",
                lambda: run_bench(python, out, check, None if full else ["matmul"], True, budget),
            ),
        ]
        for name, step in steps:
            if budget() < 10:
                check.stages.append(Stage(name, "failed", 0, "no time left in the budget"))
                continue
            step()
            last = check.stages[-1]
            print(
                f"  {last.name}: {last.status} in {last.seconds:.0f} s; {last.detail}", flush=True
            )
    if mode == "cpu":
        check.notes.append(
            "CPU mode: the CUDA build was not installed; "
            + (
                "every part ran (--full)."
                if full
                else "ran the device-dependent unit tests, notebook 01 and the matmul benchmark "
                "(make test covers the rest on a CPU; --full runs everything)."
            )
        )
    path = write_report(check, out)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
