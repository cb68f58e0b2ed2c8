"""The prepared GPU check: the course on an NVIDIA GPU, end to end, in one report.

    python3 -m tools.gpu_check [--out DIR] [--full] [--jobs N] [--budget-s S] [--dry-run]

This module is the launcher, and it imports the standard library only (and ``tools.course``,
which does too): it runs from a fresh machine's ``python3`` (3.11 or newer), before any
environment exists. Everything that needs the course's packages runs as a child, in the
environment the launcher builds:

- with an NVIDIA GPU (``nvidia-smi`` lists one): ``.venv-gpu``, requirements.txt with
  ``tensorflow-cpu`` swapped for ``tensorflow[and-cuda]`` at the same version, installed by uv
  (again only when the requirements change). Then the probe (what TensorFlow sees), the
  benchmarks the report leads with (notebook 04's DCGAN step against the TF tutorial's, matmul
  TFLOP/s against the published peak), every TensorFlow notebook at the ``test`` profile, and
  the unit tests, in that order;
- without one: ``.venv`` (``make venv``) and the CPU-safe parts: the probe, the matmul
  benchmark, notebook 01 and the unit tests that branch on the device (``--full``: every part).

``--budget-s`` (default 540, the environment included) bounds the whole check, so that it
fits a 10-minute GPU rental: a stage still running at the end is stopped with its children and
reported as stopped, with what it finished; later stages are reported as not run.
``--dry-run`` plans the same stages and writes the report without installing or running
anything: the tests drive the GPU branch with a fake ``nvidia-smi`` this way. The report is
``<out>/report.md`` (and ``report.json``); each command's output is in ``<out>/logs/``.
Exit status 1 if a stage failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tools import course

ROOT = course.ROOT
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
#: make unit's selection (the Makefile's), for every unit test
ALL_UNIT_TESTS = ["-m", "not notebooks and not site and not tpu and not bench"]
#: Notebooks run on a CPU without --full.
CPU_NOTEBOOKS = ["01_runtime_check"]
#: tools.bench's benchmarks per run: the report's two headline records on a GPU; with --full
#: also those of 03 and 07 (the engine comparisons need the TPU stack, which is not built here)
BENCHMARKS = {
    "cpu": ["matmul"],
    "gpu": ["matmul", "dcgan"],
    "full": ["matmul", "dcgan", "tfdata", "scaling"],
}
NO_GPU = "no GPU: nvidia-smi lists none, so the CUDA build is not installed"
#: The environment every stage runs with: offline data, no plots on screen, and GPU memory
#: taken as needed (TensorFlow takes almost all of it by default), so that test workers and
#: notebooks run side by side on one GPU.
STAGE_ENV = {"COURSE_OFFLINE": "1", "MPLBACKEND": "Agg", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
#: Below this many seconds left in the budget, no new command starts.
LAST_START_S = 10


@dataclass
class Stage:
    name: str
    status: str  # "passed", "failed", "stopped" (by the budget), "not run", "planned" (dry run)
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


def headline(records: list[dict]) -> list[str]:
    """What the device does: notebook 04's DCGAN step against the tutorial's, and the best
    matmul TFLOP/s per dtype against the published peak, from tools.bench's records."""
    lines = []
    for r in records:
        if r["name"] == "dcgan_vs_tutorial" and r.get("ratio"):
            lines.append(
                f"- DCGAN step on {r['device']}: {r['value']:,.0f} images/s ({r['metric']}), "
                f"{r['ratio']:.2f}x the TF tutorial's step ({r['baseline_value']:,.0f} images/s)"
            )
    best: dict[tuple, dict] = {}
    for r in records:
        if r["name"].startswith("matmul_roofline_") and "CPU" not in r["device"]:
            key = (r["device"], r["metric"].split()[2])  # "median TFLOP/s, <dtype> NxN"
            if key not in best or r["value"] > best[key]["value"]:
                best[key] = r
    for (device, dtype), r in best.items():
        against = (
            f", {r['value'] / r['baseline_value']:.0%} of the published peak "
            f"({r['baseline_value']:g} TFLOP/s)"
            if r.get("baseline_value")
            else " (no published peak for this device)"
        )
        size = r["metric"].split()[-1]
        lines.append(f"- matmul on {device}, {dtype}: {r['value']:.1f} TFLOP/s at {size}{against}")
    return lines


def report_markdown(check: Check) -> str:
    """The report: device first, what it does, then each stage, the tests, the notebooks and
    every benchmark record."""
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
    if found := headline(check.bench):
        lines += ["", "## What this device does", ""] + found
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
        keys = ["name", "device", "metric", "value", "unit", "baseline", "ratio"]
        lines += _table(keys, [[r.get(k) for k in keys] for r in check.bench])
    if check.notes:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in check.notes]
    unfinished = [s.name for s in check.stages if s.status in ("stopped", "not run")]
    if not check.ok:
        verdict = "some stages FAILED"
    elif unfinished:
        verdict = f"nothing failed; the budget left unfinished: {', '.join(unfinished)}"
    elif any(s.status == "planned" for s in check.stages):
        verdict = "dry run: planned, nothing installed or run"
    else:
        verdict = "all stages passed"
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


def detect_gpus() -> list[str]:
    """The GPUs ``nvidia-smi`` lists, as "name (driver D, M MiB)"; none without it."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    fields = [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines()]
    return [
        f"{name} (driver {driver}, {memory} MiB)"
        for name, driver, memory in (f for f in fields if len(f) == 3)
        if done.returncode == 0
    ]


# -- running commands within the budget ---------------------------------------------------------


class Runner:
    """Runs each command in the repository, in a process group of its own, with its output in a
    log, until the budget's deadline; in a dry run it only records what it would run."""

    def __init__(self, out: Path, budget_s: float, dry_run: bool, last_start_s=LAST_START_S):
        self.out, self.dry_run, self.last_start_s = out, dry_run, last_start_s
        self.deadline = time.monotonic() + budget_s
        self.planned: list[str] = []

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def __call__(self, cmd: list, log: str) -> tuple[str, str, float]:
        """(status, output, seconds): status "passed", "failed", "stopped" or "not run"."""
        cmd = [str(c) for c in cmd]
        if self.dry_run:
            self.planned.append(shlex.join(cmd))
            return "planned", "", 0.0
        if self.left() < self.last_start_s:
            return "not run", "", 0.0
        path = self.out / "logs" / f"{log}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with open(path, "w") as output:
            child = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**os.environ, **STAGE_ENV},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so that the budget stops its children too
            )
            try:
                code = child.wait(timeout=max(1.0, self.left()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                code = None
        if code is None:
            with open(path, "a") as output:
                output.write(f"\n[stopped by the budget after {time.monotonic() - start:.0f} s]\n")
        status = "stopped" if code is None else "passed" if code == 0 else "failed"
        return status, path.read_text(errors="replace"), time.monotonic() - start


def uv_version() -> str:
    """The uv release the Makefile installs (``UV_VERSION``)."""
    found = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise ValueError("the Makefile names no UV_VERSION")
    return found.group(1)


def environment(mode: str, run: Runner, check: Check) -> Path:
    """``.venv-gpu`` with the CUDA build (installed again only when requirements change), or
    the normal ``.venv`` through ``make venv``. Returns its Python."""
    start = time.monotonic()
    if mode == "cpu":
        python, steps = CPU_VENV / "bin" / "python", [["make", "--no-print-directory", "venv"]]
        detail, wanted = ".venv (CPU TensorFlow, from requirements.txt)", None
    else:
        requirements = gpu_requirements((ROOT / "requirements.txt").read_text())
        pins = requirements + (ROOT / "pyproject.toml").read_text()
        wanted = hashlib.sha256(pins.encode()).hexdigest()
        stamp, python = GPU_VENV / ".installed", GPU_VENV / "bin" / "python"
        detail = ".venv-gpu (tensorflow[and-cuda] at the pinned version)"
        steps = []
        if not (python.exists() and stamp.exists() and stamp.read_text() == wanted):
            pinned = run.out / "requirements-gpu.txt"
            pinned.parent.mkdir(parents=True, exist_ok=True)
            pinned.write_text(requirements)
            uv = [GPU_VENV / "bin" / "uv", "pip", "install", "-q", "--python", python]
            steps = [
                [sys.executable, "-m", "venv", GPU_VENV],
                [python, "-m", "pip", "install", "-q", f"uv=={uv_version()}"],
                [*uv, "-r", pinned],
                [*uv, "--no-deps", "-e", ROOT],
            ]
        else:
            detail += ", up to date"
    status, output = "passed", ""
    for number, step in enumerate(steps):
        status, output, _ = run(step, f"environment-{number}")
        if status not in ("passed", "planned"):
            break
    if status == "passed" and wanted and steps:
        (GPU_VENV / ".installed").write_text(wanted)
    if status in ("failed", "stopped") and output.strip():
        detail += ": " + output.strip().splitlines()[-1][:200]
    if run.dry_run:
        status, detail = (
            "planned",
            detail + "; would run: " + " && ".join(run.planned or ["nothing"]),
        )
    check.environment = str(python.parent.parent.relative_to(ROOT))
    check.stages.append(Stage("environment", status, time.monotonic() - start, detail))
    return python


def probe(python: Path, run: Runner, check: Check) -> None:
    status, output, seconds = run([python, "-m", "tools.gpu_check", "--child", "probe"], "probe")
    check.runtime = last_json_line(output) or {}
    detail = f"TensorFlow {check.runtime.get('tensorflow')}" if check.runtime else ""
    detail = detail or ("" if status == "planned" else "see logs/probe.log")
    if status == "passed" and check.mode == "gpu" and not check.runtime.get("gpus"):
        check.notes.append("nvidia-smi lists a GPU but TensorFlow sees none (CUDA mismatch?)")
        status = "failed"
    check.stages.append(Stage("probe", status, seconds, detail))


def bench(python: Path, run: Runner, check: Check, names: list[str]) -> None:
    results = run.out / "bench" / "results.json"
    cmd = [python, "-m", "tools.bench", "--light", "--out", results.parent, "--only", *names]
    status, _, seconds = run(cmd, "bench")
    check.bench = json.loads(results.read_text()) if status == "passed" else []
    detail = f"tools.bench --light, {', '.join(names)}: {len(check.bench)} records"
    check.stages.append(Stage("bench", status, seconds, detail))


def notebooks(python: Path, run: Runner, check: Check, names: list[str], jobs: int) -> None:
    start, build = time.monotonic(), run.out / "notebooks"

    def one(name: str) -> dict:
        status, output, seconds = run(
            [python, "-m", "tools.gpu_check", "--child", "notebook", name, build], name
        )
        found = last_json_line(output)
        if isinstance(found, dict):
            return found
        error = {"stopped": "stopped by the budget", "not run": "the budget ran out first"}
        if status == "failed":
            error["failed"] = "the runner failed: see logs/" + name + ".log"
        return {
            "notebook": name,
            "status": status,
            "seconds": seconds,
            "device": "",
            "error": error.get(status, ""),
        }

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        check.notebooks = list(pool.map(one, names))
    statuses = [n["status"] for n in check.notebooks]
    passed = statuses.count("passed")
    status = next(
        (s for s in ("failed", "stopped", "not run", "planned") if s in statuses), "passed"
    )
    detail = f"{passed} of {len(names)} passed, {jobs} at a time: {', '.join(names)}"
    check.stages.append(Stage("notebooks", status, time.monotonic() - start, detail))


def unit_tests(python: Path, run: Runner, check: Check, selection: list[str], jobs: int) -> None:
    xml = run.out / "unit.xml"
    xml.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd += ["-n", str(jobs)] if jobs > 1 else []
    status, _, seconds = run(cmd + selection, "unit")
    check.tests = junit_counts(xml) if xml.exists() else {}
    t = check.tests
    summary = f": {t.get('passed', 0)} passed, {t.get('failed', 0)} failed" if t else ""
    scope = "all unit tests" if selection == ALL_UNIT_TESTS else "the device-dependent unit tests"
    check.stages.append(Stage("unit tests", status, seconds, scope + summary))


def child(what: str, *args: str) -> None:
    """A stage's work, run by the environment's Python (``--child``): the course's packages are
    imported here, never by the launcher. Prints one JSON line for the launcher to read."""
    from tools import run_notebooks  # noqa: PLC0415  (the launcher runs without it)

    if what == "probe":
        from helpers import devices  # noqa: PLC0415
        from helpers.logs import import_tensorflow  # noqa: PLC0415

        tf = import_tensorflow()
        build = tf.sysconfig.get_build_info()
        facts = {
            "tensorflow": tf.__version__,
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "gpus": [g.describe() for g in devices.list_gpus()],
        }
    else:  # "notebook", its name and the folder for its executed copy
        path = course.NOTEBOOKS / f"{args[0]}.ipynb"
        r = run_notebooks.execute(path, Path(args[1]), course.parameters_for(path.stem, "test"))
        facts = {"notebook": r.notebook, "status": r.status, "seconds": r.seconds}
        facts |= {"device": r.device, "error": r.error}
    print(json.dumps(facts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=course.BUILD / "gpu-check")
    parser.add_argument("--full", action="store_true", help="on a CPU too: every part")
    parser.add_argument("--jobs", type=int, default=0, help="parallel workers (default: auto)")
    parser.add_argument("--budget-s", type=float, default=540, help="the whole check's seconds")
    parser.add_argument("--dry-run", action="store_true", help="plan, install and run nothing")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child) or 0
    if args.budget_s <= LAST_START_S:
        parser.error(f"--budget-s={args.budget_s:g}: allowed: more than {LAST_START_S} seconds")
    gpus = detect_gpus()
    mode = "gpu" if gpus else "cpu"
    device = "; ".join(gpus) or NO_GPU
    print(f"GPU check: {device}" + ("" if gpus else "; running the CPU-safe parts"), flush=True)
    check = Check(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), mode, device)
    jobs = args.jobs or max(1, min(4, (os.cpu_count() or 2) // 4))
    full = args.full or mode == "gpu"
    out = args.out.resolve()
    run = Runner(out, args.budget_s, args.dry_run)
    python = environment(mode, run, check)
    made = check.stages[-1]
    print(f"  environment: {made.status} in {made.seconds:.0f} s; {made.detail}", flush=True)
    if check.stages[-1].status in ("passed", "planned"):
        names = [p.stem for p in course.stack_notebooks("pinned")] if full else CPU_NOTEBOOKS
        steps = [
            lambda: probe(python, run, check),
            lambda: bench(python, run, check, BENCHMARKS["full" if args.full else mode]),
            lambda: notebooks(python, run, check, names, jobs),
            lambda: unit_tests(python, run, check, ALL_UNIT_TESTS if full else DEVICE_TESTS, jobs),
        ]
        for step in steps:
            run.planned.clear()
            step()
            last = check.stages[-1]
            if run.dry_run:
                last.detail += "; would run: " + " ; ".join(run.planned)
            print(
                f"  {last.name}: {last.status} in {last.seconds:.0f} s; {last.detail}", flush=True
            )
    if args.dry_run:
        check.notes.append("dry run (--dry-run): nothing was installed or run")
    if mode == "cpu":
        parts = (
            "every part ran (--full)"
            if full
            else (
                "ran the matmul benchmark, notebook 01 and the device-dependent unit tests "
                "(make test covers the rest on a CPU; --full runs everything)"
            )
        )
        check.notes.append(f"CPU mode: the CUDA build was not installed; {parts}.")
    path = write_report(check, out)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
