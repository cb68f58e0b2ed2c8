"""The prepared GPU check (`make gpu-check`): the course on an NVIDIA GPU, in one report.

The launcher imports the standard library only; each stage runs in the environment it builds.
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tools import course

ROOT = course.ROOT
GPU_VENV = ROOT / ".venv-gpu"
#: The unit tests whose assertions branch on the device (a CPU runs only these).
DEVICE_TESTS = [f"tests/test_{name}.py"
                for name in ("environment", "devices", "migrations", "roofline", "logs")]
ALL_UNIT_TESTS = ["-m", "not notebooks and not site and not tpu and not bench"]  # make unit's
CPU_NOTEBOOKS = ["01_runtime_check"]
BENCHMARKS = {"cpu": ["matmul"], "gpu": ["matmul", "dcgan"]}  # the headline records
NO_GPU = "no GPU: nvidia-smi lists none, so the CUDA build is not installed"
#: `make gpu-wheels`: Keras and the notebook tools, for an image without TensorFlow or a network
WHEELS = course.BUILD / "gpu-wheels"
IMAGE_NOTEBOOKS = ["09_tpu_keras_jax"]  # Keras on JAX: what such an image runs
NO_TF = "no TensorFlow on this image, and no network to install it"
ON_GPU = ["notebook 09 on the GPU", "DCGAN step in PyTorch on CUDA"]  # where JAX, torch see none
#: JAX started before 09's first cell, whose JAX_PLATFORMS=cpu then cannot hide the GPU
JAX_FIRST = "import jax  # noqa: F401  (make gpu-check, an IPython startup file)\n"
#: This Python's packages, for a venv (--system-site-packages misses them where it is a venv)
SITE_PTH = "import site, sys; open(sys.argv[1], 'w').write('\\n'.join(site.getsitepackages()))"
#: Offline data, no plots on screen, GPU memory taken as needed (so workers share one GPU).
STAGE_ENV = {"COURSE_OFFLINE": "1", "MPLBACKEND": "Agg", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
LAST_START_S = 10  # no command starts with fewer seconds of the budget left


@dataclass
class Stage:
    name: str
    status: str  # passed, failed, stopped (by the budget), not run, planned (dry run)
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Check:
    when: str
    mode: str  # "gpu" or "cpu"
    device: str  # the GPU(s) nvidia-smi lists, or NO_GPU
    environment: str = ""
    runtime: dict = field(default_factory=dict)  # what TensorFlow says (the probe)
    stages: list[Stage] = field(default_factory=list)
    tests: dict = field(default_factory=dict)  # junit_counts
    notebooks: list[dict] = field(default_factory=list)
    bench: list[dict] = field(default_factory=list)
    not_run: dict = field(default_factory=dict)  # what was not run here, and why

    @property
    def ok(self) -> bool:
        return all(stage.status != "failed" for stage in self.stages)


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A markdown table's lines: floats to 4 figures, pipes escaped (tools.bench's too)."""

    def fmt(value) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(map(fmt, row)) + " |" for row in rows]


def headline(records: list[dict]) -> list[str]:
    """The DCGAN step against the tutorial's, and the best matmul per dtype against its peak."""
    lines = [f"- DCGAN step on {r['device']}: {r['value']:,.0f} images/s ({r['metric']}), "
             f"{r['ratio']:.2f}x the TF tutorial's step ({r['baseline_value']:,.0f} images/s)"
             for r in records if r["name"] == "dcgan_vs_tutorial" and r.get("ratio")]
    matmuls = [r for r in records
               if r["name"].startswith("matmul_roofline_") and "CPU" not in r["device"]]
    best = {(r["device"], r["metric"].split()[2]): r  # "median TFLOP/s, <dtype> NxN"
            for r in sorted(matmuls, key=lambda r: r["value"])}  # the fastest last, so kept
    for (device, dtype), r in best.items():
        peak = r.get("baseline_value")
        against = (f", {r['value'] / peak:.0%} of the published peak ({peak:g} TFLOP/s)" if peak
                   else " (no published peak for this device)")
        size = r["metric"].split()[-1]
        lines.append(f"- matmul on {device}, {dtype}: {r['value']:.1f} TFLOP/s at {size}{against}")
    return lines


def report_markdown(check: Check) -> str:
    """Device first, what it does, then each stage, the tests, the notebooks and the records."""
    lines = ["# GPU check", "", f"Run {check.when}, mode: **{check.mode}**.", ""]
    if check.mode == "gpu" and (unseen := [check.not_run[p] for p in ON_GPU if p in check.not_run]):
        lines += [f"**nvidia-smi lists a GPU, but {'; '.join(unseen)}.**", ""]
    lines.append(f"Device: {check.device}" if check.mode == "gpu" else f"Device: **{NO_GPU}**.")
    if rt := check.runtime:
        build = (f"CUDA {rt.get('cuda')}, cuDNN {rt.get('cudnn')}" if rt.get("cuda_build")
                 else "CPU-only build")
        engine = (f"JAX {rt['jax']}" if "jax" in rt
                  else f"TensorFlow {rt.get('tensorflow')} ({build})")
        lines.append(f"{engine}; GPUs it sees: {'; '.join(rt.get('gpus') or []) or 'none'}")
    if check.not_run:
        lines += ["", "## Not run", "", *[f"- {part}: {why}"
                                          for part, why in check.not_run.items()]]
    if found := headline(check.bench):
        lines += ["", "## What this device does", "", *found]
    lines += ["", "## Stages", "", *table(["stage", "status", "seconds", "detail"], [
        [s.name, s.status, f"{s.seconds:.1f}", s.detail] for s in check.stages])]
    if t := check.tests:
        lines += ["", "## Unit tests", "", f"{t['passed']} passed, {t['failed']} failed, "
                  f"{t['skipped']} skipped.", *[f"- failed: `{name}`" for name in t["failures"]]]
    if check.notebooks:
        keys = ["notebook", "status", "seconds", "device", "error"]
        rows = [[f"{n[k]:.1f}" if k == "seconds" else n[k] for k in keys] for n in check.notebooks]
        lines += ["", "## Notebooks (test profile)", "", *table(keys, rows)]
    if check.bench:
        keys = ["name", "device", "metric", "value", "unit", "spread", "baseline", "ratio"]
        lines += ["", "## Benchmarks", "", *table(keys, [[r.get(k) for k in keys]
                                                         for r in check.bench])]
    unfinished = ", ".join(s.name for s in check.stages if s.status in ("stopped", "not run"))
    verdict = ("some stages FAILED" if not check.ok
               else f"nothing failed; the budget left unfinished: {unfinished}" if unfinished
               else "dry run: planned, nothing installed or run"
               if any(s.status == "planned" for s in check.stages) else "all stages passed")
    verdict += f"; not run: {', '.join(check.not_run)}" if check.not_run else ""
    return "\n".join(lines + ["", f"Result: {verdict}.", ""])


def write_report(check: Check, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(asdict(check), indent=1) + "\n")
    (out / "report.md").write_text(report_markdown(check))
    return out / "report.md"


def junit_counts(path: Path) -> dict:
    """passed / failed / skipped and the failing test ids, from pytest's ``--junitxml``."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = ("failed" if tags & {"failure", "error"}
                   else "skipped" if "skipped" in tags else "passed")
        counts[outcome] += 1
        if outcome == "failed":
            counts["failures"].append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return counts


def last_json_line(text: str) -> dict | list | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith(("{", "[")):
            with contextlib.suppress(json.JSONDecodeError):
                return json.loads(line)
    return None


def detect_gpus() -> list[str]:
    """The GPUs ``nvidia-smi`` lists, as "name (driver D, M MiB)"; none without it."""
    query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines()]
    ok = done.returncode == 0
    return [f"{r[0]} (driver {r[1]}, {r[2]} MiB)" for r in rows if ok and len(r) == 3]


def tensorflow_missing(venv: Path) -> str:
    """:data:`NO_TF` where pip's index does not answer and no Python here imports TensorFlow."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
    with contextlib.suppress(OSError, ValueError):  # no network, no such host, a bad URL
        urllib.request.urlopen(urllib.request.Request(index, method="HEAD"), timeout=10)
        return ""
    pythons = [p for p in (Path(sys.executable), venv / "bin" / "python") if p.exists()]
    codes = [subprocess.run([p, "-c", "import tensorflow"], capture_output=True).returncode
             for p in pythons]
    return "" if 0 in codes else NO_TF


def image_steps(venv: Path, wheels: Path) -> tuple[list, str]:
    """A venv on this Python's own packages (its JAX) and ``wheels``, installed with no index."""
    pins, here = wheels / "requirements.txt", f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not pins.exists():
        return [], f"no {pins}: run `make gpu-wheels` where PyPI answers, and bring the folder"
    pth = venv / "lib" / here / "site-packages" / "image.pth"
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q"]
    return [[sys.executable, "-m", "venv", "--clear", "--without-pip", "--system-site-packages",
             venv], [sys.executable, "-c", SITE_PTH, pth],
            [*pip, "--no-index", "--find-links", wheels, "-r", pins, "--no-build-isolation",
             "-e", ROOT]], f"this Python's own packages, and the wheels in {wheels} (no index)"


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found += (below := children.get(todo.pop(), []))
        todo += below
    return found


class Runner:
    """Runs logged commands until the budget's deadline, then stops them; a dry run records."""

    def __init__(self, out: Path, budget_s: float, dry_run: bool, last_start_s=LAST_START_S,
                 env=STAGE_ENV):
        self.out, self.dry_run, self.last_start_s, self.env = out, dry_run, last_start_s, env
        self.deadline = time.monotonic() + budget_s
        self.planned: list[str] = []

    def __call__(self, cmd: list, log: str) -> tuple[str, str, float]:
        """(status, output, seconds): "passed", "failed", "stopped", "not run" or "planned"."""
        cmd = [str(c) for c in cmd]
        if self.dry_run:
            self.planned.append(shlex.join(cmd))
            return "planned", "", 0.0
        if self.deadline - time.monotonic() < self.last_start_s:
            return "not run", "", 0.0
        path = self.out / "logs" / f"{log}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with open(path, "w") as output:
            child = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **self.env},
                                     stdin=subprocess.DEVNULL, stdout=output,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = child.wait(timeout=max(1.0, self.deadline - time.monotonic()))
                status = "passed" if code == 0 else "failed"
            except subprocess.TimeoutExpired:
                status = "stopped"
                stray = descendants(child.pid)  # a notebook's kernel runs in a session of its own
                os.killpg(child.pid, signal.SIGKILL)
                for pid in stray:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                child.wait()
                output.write(f"\n[stopped by the budget after {time.monotonic() - start:.0f} s]\n")
        return status, path.read_text(errors="replace"), time.monotonic() - start


def environment(mode: str, run: Runner, check: Check, wheels: Path | None = None) -> Path:
    """``.venv-gpu`` (uv skips what it holds already), ``.venv``, or with ``wheels`` (without
    TensorFlow) a venv in the output folder; returns its Python."""
    start, venv = time.monotonic(), GPU_VENV if mode == "gpu" else ROOT / ".venv"
    venv = run.out / "venv" if wheels else venv
    python = venv / "bin" / "python"
    if wheels:
        steps, detail = image_steps(venv, wheels)
    elif mode == "cpu":
        steps = [["make", "--no-print-directory", "venv"]]
        detail = ".venv (CPU TensorFlow, from requirements.txt)"
    else:
        # tensorflow-cpu swapped for the CUDA build at its version (a probe sees none without)
        detail = ".venv-gpu (tensorflow[and-cuda] at the pinned version)"
        pinned = run.out / "requirements-gpu.txt"
        pinned.parent.mkdir(parents=True, exist_ok=True)
        pinned.write_text(re.sub(r"(?m)^tensorflow-cpu==", "tensorflow[and-cuda]==",
                                 (ROOT / "requirements.txt").read_text()))
        uv_version = re.search(r"(?m)^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text())[1]
        uv = [venv / "bin" / "uv", "pip", "install", "-q", "--python", python]
        steps = [[sys.executable, "-m", "venv", venv],
                 [python, "-m", "pip", "install", "-q", f"uv=={uv_version}"],
                 [*uv, "-r", pinned], [*uv, "--no-deps", "-e", ROOT]]
    status, output = "failed" if wheels and not steps else "passed", ""
    for number, step in enumerate(steps):
        status, output, _ = run(step, f"environment-{number}")
        if status not in ("passed", "planned"):
            break
    if status in ("failed", "stopped") and output.strip():
        detail += ": " + output.strip().splitlines()[-1][:200]
    check.environment = str(venv.relative_to(ROOT) if venv.is_relative_to(ROOT) else venv)
    check.stages.append(Stage("environment", status, time.monotonic() - start, detail))
    return python


def probe(python: Path, run: Runner, check: Check, *engine: str) -> None:
    cmd = [python, "-m", "tools.gpu_check", "--child", "probe", *engine]  # TensorFlow, or "jax"
    status, output, seconds = run(cmd, "probe")
    check.runtime = rt = last_json_line(output) or {}
    detail = f"JAX {rt['jax']}" if "jax" in rt else f"TensorFlow {rt['tensorflow']}" if rt else ""
    detail = detail or ("" if status == "planned" else "see logs/probe.log")
    if status == "passed" and check.mode == "gpu" and not rt.get("gpus") and "jax" not in rt:
        status, detail = "failed", detail + ": nvidia-smi lists a GPU but it sees none (CUDA?)"
    if check.mode == "gpu" and rt.get("unseen"):  # JAX sees no GPU: 09 runs on the CPU
        check.not_run[ON_GPU[0]] = rt["unseen"]
    check.stages.append(Stage("probe", status, seconds, detail))


def bench(python: Path, run: Runner, check: Check, names: list[str]) -> None:
    results = run.out / "bench" / "results.json"
    cmd = [python, "-m", "tools.bench", "--light", "--out", results.parent, "--only", *names]
    status, _, seconds = run(cmd, "bench")
    check.bench = json.loads(results.read_text()) if status == "passed" else []
    check.not_run.update((ON_GPU[1], r["not_run"]) for r in check.bench if r.get("not_run"))
    detail = f"tools.bench --light, {', '.join(names)}: {len(check.bench)} records"
    check.stages.append(Stage("bench", status, seconds, detail))


def notebooks(python: Path, run: Runner, check: Check, names: list[str], jobs: int) -> None:
    start, build = time.monotonic(), run.out / "notebooks"

    def one(name: str) -> dict:
        cmd = [python, "-m", "tools.gpu_check", "--child", "notebook", name, build]
        status, output, seconds = run(cmd, name)
        found = last_json_line(output)
        return found if isinstance(found, dict) else {
            "notebook": name, "status": status, "seconds": seconds, "device": "",
            "error": f"the runner failed: see logs/{name}.log" if status == "failed" else ""}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        check.notebooks = list(pool.map(one, names))
    statuses = [n["status"] for n in check.notebooks]
    status = next((s for s in ("failed", "stopped", "not run", "planned") if s in statuses),
                  "passed")
    passed = statuses.count("passed")
    detail = f"{passed} of {len(names)} passed, {jobs} at a time: {', '.join(names)}"
    check.stages.append(Stage("notebooks", status, time.monotonic() - start, detail))


def unit_tests(python: Path, run: Runner, check: Check, selection: list[str], jobs: int) -> None:
    xml = run.out / "unit.xml"
    xml.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    cmd += ["-n", str(jobs)] if jobs > 1 else []
    status, _, seconds = run(cmd + selection, "unit")
    check.tests = t = junit_counts(xml) if xml.exists() else {}
    summary = f": {t['passed']} passed, {t['failed']} failed" if t else ""
    scope = "all unit tests" if selection == ALL_UNIT_TESTS else "the device-dependent unit tests"
    check.stages.append(Stage("unit tests", status, seconds, scope + summary))


def staged(run: Runner, check: Check, step, *args):
    """Run a stage's function; in a dry run, say what it would run; print its line."""
    run.planned.clear()
    result = step(*args)
    last = check.stages[-1]
    if run.dry_run:
        last.status = "planned"
        last.detail += "; would run: " + (" ; ".join(run.planned) or "nothing")
    print(f"  {last.name}: {last.status} in {last.seconds:.0f} s; {last.detail}", flush=True)
    return result


def child(what: str, *args: str) -> None:
    """A stage's work in the environment's Python (``--child``): one JSON line."""
    if what == "probe" and args:  # JAX's view, where there is no TensorFlow
        import jax  # noqa: PLC0415

        gpus = [d.device_kind for d in jax.devices() if d.platform == "gpu"]
        found = f"JAX {jax.__version__} sees {jax.default_backend()} only (likely a CPU-only build)"
        facts = {"jax": jax.__version__, "gpus": gpus, "unseen": "" if gpus else found}
    elif what == "probe":
        from helpers import devices  # noqa: PLC0415
        from helpers.logs import import_tensorflow  # noqa: PLC0415

        tf = import_tensorflow()
        build = tf.sysconfig.get_build_info()
        facts = {"tensorflow": tf.__version__, "cuda_build": bool(build.get("is_cuda_build")),
                 "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
                 "gpus": [g.describe() for g in devices.list_gpus()]}
    else:  # "notebook", its name and the folder for its executed copy
        from tools import run_notebooks  # noqa: PLC0415  (the launcher runs without it)

        path = course.NOTEBOOKS / f"{args[0]}.ipynb"
        r = run_notebooks.execute(path, Path(args[1]), course.parameters_for(path.stem, "test"))
        facts = {k: getattr(r, k) for k in ("notebook", "status", "seconds", "device", "error")}
    print(json.dumps(facts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=course.BUILD / "gpu-check")
    parser.add_argument("--budget-s", type=float, default=540, help="the whole check's seconds")
    parser.add_argument("--dry-run", action="store_true", help="plan, install and run nothing")
    parser.add_argument("--without-tensorflow", action="store_true", help="run only what needs "
                        "no TensorFlow (chosen where it can be neither imported nor installed)")
    parser.add_argument("--wheels", type=Path, default=WHEELS, help="make gpu-wheels's folder")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child) or 0
    if args.budget_s <= LAST_START_S:
        parser.error(f"--budget-s={args.budget_s:g}: allowed: more than {LAST_START_S} seconds")
    gpus = detect_gpus()
    mode, device = ("gpu", "; ".join(gpus)) if gpus else ("cpu", NO_GPU)
    why = ("asked (--without-tensorflow)" if args.without_tensorflow
           else tensorflow_missing(GPU_VENV if gpus else ROOT / ".venv"))
    print(f"GPU check: {device}" + ("" if gpus else "; running the CPU-safe parts")
          + (f"; without TensorFlow: {why}" if why else ""), flush=True)
    check = Check(datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), mode, device)
    jobs = max(1, min(4, (os.cpu_count() or 2) // 4))  # notebooks at once, pytest's workers
    out = args.out.resolve()
    pinned = [p.stem for p in course.stack_notebooks("pinned")]
    stages = [(probe,), (bench, BENCHMARKS[mode]),
              (notebooks, pinned if gpus else CPU_NOTEBOOKS, jobs),
              (unit_tests, ALL_UNIT_TESTS if gpus else DEVICE_TESTS, jobs)]
    if why:
        startup = out / "ipython" / "profile_default" / "startup" / "00-jax.py"
        startup.parent.mkdir(parents=True, exist_ok=True)
        startup.write_text(JAX_FIRST)
        check.not_run = dict.fromkeys([f"notebooks {', '.join(n[:2] for n in pinned)}",
                                       "the unit tests", "tools.bench's TensorFlow records"], why)
        stages = [(probe, "jax"), (bench, ["dcgan_cuda"]), (notebooks, IMAGE_NOTEBOOKS, 1)]
    run = Runner(out, args.budget_s, args.dry_run, env={**STAGE_ENV, "IPYTHONDIR": str(
        out / "ipython")})  # the kernels' IPython profile: the check's own
    python = staged(run, check, environment, mode, run, check, args.wheels if why else None)
    if check.stages[-1].status in ("passed", "planned"):
        for step, *more in stages:
            staged(run, check, step, python, run, check, *more)
    path = write_report(check, run.out)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
