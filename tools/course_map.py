"""The README's course map: what each notebook builds on, the runtime it wants, and how long
``make run`` takes it, measured.

    python -m tools.course_map measure --profile quick [--budget-s 900] [NAME ...]
    python -m tools.course_map readme [--check]

``measure`` runs each notebook as ``make run`` does (``tools.run_notebooks``, one child process
per notebook) and records, in ``docs/measured_times.json``, its wall-clock seconds, the CPU
seconds of all its processes (which other work on the machine changes less), the device and the
machine. A notebook still running after ``--budget-s`` is stopped and recorded as such: the full
profile is sized for a Colab GPU, not for a laptop's CPU. ``readme``
writes the map into README.md between its markers; ``--check`` (in ``make check-notebooks``)
fails where the README and the records differ.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from tools.course import BUILD, ROOT, notebook_paths, read_notebook, write_between

RECORDS = ROOT / "docs" / "measured_times.json"
README = ROOT / "README.md"
START, END = "<!-- course-map:start -->", "<!-- course-map:end -->"
PROFILES = ("quick", "full")  # the map's columns
# what `measure` times: also the test profile, whose times order make test's notebook runs
# (tools.course.heaviest_first)
MEASURED = (*PROFILES, "test")

#: The runtime each notebook wants; every one also runs, with stand-ins, on a CPU.
RUNTIMES = {
    "01": "any: CPU, GPU or TPU",
    "02": "a GPU (Colab's T4), to compare with the CPU",
    "03": "any; a GPU for the utilisation section",
    "04": "a GPU (Colab's T4 or better)",
    "05": "several GPUs (Kaggle's T4 x2); 8 logical CPU devices elsewhere",
    "06": "a GPU (its memory is the lesson); a memory budget stands in on a CPU",
    "07": "several GPUs to scale; simulated replicas and local workers elsewhere",
    "08": "a TPU (Colab's v5e-1, Kaggle's v5e-8), no TensorFlow needed; 8 simulated devices "
          "elsewhere",
    "09": "a TPU (Colab's v5e-1, Kaggle's v5e-8), no TensorFlow needed; 8 simulated devices "
          "elsewhere",
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux: from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_one(name: str, profile: str, budget_s: float, build: Path,
                command: list[str] | None = None) -> dict:
    """Run one notebook as ``make run`` does; stop it (all its processes) after ``budget_s``.
    ``command`` replaces the run (the tests time a stand-in)."""
    command = command or [sys.executable, "-m", "tools.run_notebooks", "--profile", profile,
                          "--build", str(build), name]
    # as on a fresh machine: a run left by an earlier measurement would be resumed (04), not
    # timed. The folder is this tool's own, under build/.
    shutil.rmtree(build / "work" / name, ignore_errors=True)
    load = os.getloadavg()[0]  # other work running as it starts: it lengthens the wall time
    cpu0, start = _children_cpu_s(), time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        output, _ = child.communicate(timeout=budget_s)
        status = "passed" if child.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(child.pid), child.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        output, _ = child.communicate()
        status = "stopped"
    wall = time.perf_counter() - start
    found = re.search(r" (?:passed|failed) in [\d.]+ s on (.+?);", output or "")
    return {
        "notebook": name, "profile": profile, "status": status, "wall_s": round(wall),
        # the CPU time of the processes waited for (the kernel, and the children it waited for);
        # a stopped run's is lost with its killed processes
        "cpu_s": round(_children_cpu_s() - cpu0) if status != "stopped" else None,
        "device": found[1] if found else "not stated", "budget_s": budget_s,
        "load_at_start": round(load, 1),
        # offline, the data sets fall back to bundled ones (scikit-learn's digits: 1,797 images)
        "offline": os.environ.get("COURSE_OFFLINE") == "1",
        "date": date.today().isoformat(),
        "machine": f"{_cpu_model()}, {os.cpu_count()} logical CPUs",
    }


def load() -> dict:
    return json.loads(RECORDS.read_text()) if RECORDS.exists() else {}


def save(records: dict) -> None:
    RECORDS.parent.mkdir(parents=True, exist_ok=True)
    RECORDS.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")


def _minutes(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


def cell(record: dict | None) -> str:
    if record is None:
        return "not measured"
    if record["status"] == "stopped":
        return f"> {_minutes(record['wall_s'])} (stopped there)"
    text = f"{_minutes(record['wall_s'])} (CPU {_minutes(record['cpu_s'])})"
    return text if record["status"] == "passed" else f"{text}, failed"


def prerequisites(path: Path) -> str:
    """The notebooks a notebook's "**Prerequisites:**" line names, e.g. "01, 02"."""
    intro = "\n".join(c.source for c in read_notebook(path).cells[:3])
    found = re.search(r"^\*\*Prerequisites:\*\* (.+)$", intro, re.MULTILINE)
    numbers = sorted(set(re.findall(r"\b(\d\d)\b", found[1]))) if found else []
    return ", ".join(numbers) or "none"


def title(path: Path) -> str:
    """A notebook's H1 title, up to its colon: "Runtime check", "DCGAN on a GPU"."""
    first = read_notebook(path).cells[0].source.split("\n", 1)[0]
    return first.lstrip("# ").split(":", 1)[0].strip()


def course_map(records: dict) -> str:
    rows = ["| # | Notebook | Builds on | Wants | `make run` (quick) | `make run PROFILE=full` |",
            "|---|---|---|---|---|---|"]
    machines, dates = set(), set()
    for path in notebook_paths():
        number = path.stem[:2]
        quick, full = (records.get(p, {}).get(path.stem) for p in PROFILES)
        for r in (quick, full):
            if r:
                machines.add(r["machine"])
                dates.add(r["date"])
        rows.append(f"| {number} | [{title(path)}](notebooks/{path.name}) | "
                    f"{prerequisites(path)} | {RUNTIMES.get(number, 'any')} | {cell(quick)} | "
                    f"{cell(full)} |")
    where = "; ".join(sorted(machines)) or "nowhere yet"
    when = ", ".join(sorted(dates)) or "never"
    loads = sorted(r["load_at_start"] for p in PROFILES for r in records.get(p, {}).values()
                   if "load_at_start" in r)
    busy = (f" The machine's load average as each started ranged from {loads[0]} to "
            f"{loads[-1]}." if loads else "")
    offline = any(r.get("offline") for p in PROFILES for r in records.get(p, {}).values())
    if offline:
        busy += (" Measured offline (`COURSE_OFFLINE=1`), where bundled data sets stand in for "
                 "MNIST and CIFAR-10: smaller, so the full profile trains on fewer images than "
                 "it does on Colab.")
    note = (f"\nTimes: wall clock, and in brackets the CPU time of the notebook's kernel and the "
            "processes it waited for, "
            f"measured by `python -m tools.course_map measure` on {where} ({when}), on the "
            "CPU, without an accelerator. The full profile is sized for what a Colab learner "
            "runs on a GPU, and where a notebook simulates its devices on the CPU (05's "
            "replicas without two GPUs, 08's and 09's TPU chips without a TPU) for that CPU; "
            "a run still going at the measurement's budget was stopped there "
            "(`> ...`). Other work on the machine lengthens wall times more than CPU times." + busy)
    return "\n".join(rows) + "\n" + note


def write_readme(check: bool = False) -> bool:
    """Put the map between the README's markers; with ``check``, only say if it differs."""
    return write_between(README, START, END, course_map(load()), check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure", help="time notebooks as make run does")
    run.add_argument("--profile", choices=MEASURED, default="quick")
    run.add_argument("--budget-s", type=float, default=1800, help="stop a notebook after this")
    run.add_argument("--build", type=Path, default=BUILD / "times")
    run.add_argument("names", nargs="*", help="notebook names (stems); default: all")
    readme = sub.add_parser("readme", help="write the course map into README.md")
    readme.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "readme":
        if not write_readme(args.check):
            print("README.md's course map differs from docs/measured_times.json: run "
                  "`python -m tools.course_map readme`", file=sys.stderr)
            return 1
        return 0
    records = load()
    for path in notebook_paths():
        if args.names and path.stem not in args.names:
            continue
        record = measure_one(path.stem, args.profile, args.budget_s, args.build / args.profile)
        print(f"{path.stem}: {record['status']}, {cell(record)}, on {record['device']}",
              flush=True)
        records.setdefault(args.profile, {})[path.stem] = record
        save(records)
    write_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main())
