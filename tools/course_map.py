"""The README's course map: each notebook's prerequisites, runtime and measured times."""

import argparse
import json
import os
import platform
import re
import resource
import shutil
import sys
from datetime import date
from pathlib import Path

import nbformat

from tools.course import BUILD, ROOT, notebook_paths, write_between
from tools.gpu_check import Runner, table

RECORDS = ROOT / "docs" / "measured_times.json"
README = ROOT / "README.md"
START, END = "<!-- course-map:start -->", "<!-- course-map:end -->"
PROFILES = ("quick", "full")  # the map's columns; `measure` also times the test profile's runs
TPU = "a TPU (Colab's v5e-1, Kaggle's v5e-8), no TensorFlow needed; 8 simulated devices elsewhere"
RUNTIMES = {  # the runtime each notebook wants; each also runs on a CPU, with stand-ins
    "01": "any: CPU, GPU or TPU",
    "02": "a GPU (Colab's T4), to compare with the CPU",
    "03": "any; a GPU for the utilisation section",
    "04": "a GPU (Colab's T4 or better)",
    "05": "a GPU (Colab's T4), and Google Drive to keep the run",
    "06": "several GPUs (Kaggle's T4 x2); 8 logical CPU devices elsewhere",
    "07": "a GPU (its memory is the lesson); a memory budget stands in on a CPU",
    "08": "several GPUs to scale; simulated replicas and local workers elsewhere",
    **dict.fromkeys(("09", "10", "11"), TPU),  # the TPU notebooks
}


def _cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    found = re.search(r"(?m)^model name\s*:\s*(.+)$", info.read_text() if info.exists() else "")
    return found[1].strip() if found else platform.processor() or platform.machine()


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure_one(name: str, profile: str, budget_s: float, build: Path,
                command: list[str] | None = None) -> dict:
    """Run one notebook as ``make run`` does, from a clean work folder, for ``budget_s`` at most."""
    command = command or [sys.executable, "-m", "tools.run_notebooks", "--profile", profile,
                          "--build", str(build), name]
    shutil.rmtree(build / "work" / name, ignore_errors=True)
    load = os.getloadavg()[0]  # other work running as it starts: it lengthens the wall time
    cpu0, run = _children_cpu_s(), Runner(build, budget_s, False, last_start_s=0, env={})
    status, output, wall = run(command, name)  # its log: build/logs/<name>.log
    found = re.search(r" (?:passed|failed) in [\d.]+ s on (.+?);", output or "")
    return {"notebook": name, "profile": profile, "status": status, "wall_s": round(wall),
            "cpu_s": round(_children_cpu_s() - cpu0) if status != "stopped" else None,
            "device": found[1] if found else "not stated", "budget_s": budget_s,
            "load_at_start": round(load, 1), "offline": os.environ.get("COURSE_OFFLINE") == "1",
            "date": date.today().isoformat(),
            "machine": f"{_cpu_model()}, {os.cpu_count()} logical CPUs"}


def load() -> dict:
    return json.loads(RECORDS.read_text()) if RECORDS.exists() else {}


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
    intro = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells[:3])
    found = re.search(r"^\*\*Prerequisites:\*\* (.+)$", intro, re.MULTILINE)
    return ", ".join(sorted(set(re.findall(r"\b(\d\d)\b", found[1]))) if found else []) or "none"


def title(path: Path) -> str:
    """A notebook's H1 title, up to its colon: "Runtime check", "DCGAN on a GPU"."""
    first = nbformat.read(path, as_version=4).cells[0].source.split("\n", 1)[0]
    return first.lstrip("# ").split(":", 1)[0].strip()


def course_map(records: dict) -> str:
    head = ["#", "Notebook", "Builds on", "Wants", "`make run` (quick)", "`make run PROFILE=full`"]
    rows = table(head, [[path.stem[:2], f"[{title(path)}](notebooks/{path.name})",
                         prerequisites(path), RUNTIMES.get(path.stem[:2], "any"),
                         *(cell(records.get(p, {}).get(path.stem)) for p in PROFILES)]
                        for path in notebook_paths()])
    shown = [r for path in notebook_paths() for p in PROFILES
             if (r := records.get(p, {}).get(path.stem))]
    where = "; ".join(sorted({r["machine"] for r in shown})) or "nowhere yet"
    when = ", ".join(sorted({r["date"] for r in shown})) or "never"
    loads = sorted(r["load_at_start"] for r in shown if "load_at_start" in r)
    busy = (f" The machine's load average as each started ranged from {loads[0]} to "
            f"{loads[-1]}." if loads else "")
    if any(r.get("offline") for r in shown):
        busy += (" Measured offline (`COURSE_OFFLINE=1`), where bundled data sets stand in for "
                 "MNIST and CIFAR-10: smaller, so the full profile trains on fewer images than "
                 "it does on Colab.")
    return "\n".join(rows) + (
        "\n\nTimes: wall clock, and in brackets the CPU time of the notebook's kernel and the "
        f"processes it waited for, measured by `python -m tools.course_map measure` on {where} "
        f"({when}), on the CPU, without an accelerator. The full profile is sized for what a "
        "Colab learner runs on a GPU, and where a notebook simulates its devices on the CPU "
        "(06's replicas without two GPUs, 09's to 11's TPU chips without a TPU) for that CPU; a "
        "run still going at the measurement's budget was stopped there (`> ...`). Other work on "
        "the machine lengthens wall times more than CPU times." + busy)


def write_readme(check: bool = False) -> bool:
    return write_between(README, START, END, course_map(load()), check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure", help="time notebooks as make run does")
    run.add_argument("--profile", choices=(*PROFILES, "test"), default="quick")
    run.add_argument("--budget-s", type=float, default=1800, help="stop a notebook after this")
    run.add_argument("names", nargs="*", help="notebook names (stems); default: all")
    sub.add_parser("readme", help="write the course map into README.md").add_argument(
        "--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "readme":
        if write_readme(args.check):
            return 0
        print("README.md's course map is stale: run `python -m tools.course_map readme`",
              file=sys.stderr)
        return 1
    records = load()
    for path in notebook_paths():
        if not args.names or path.stem in args.names:
            record = measure_one(path.stem, args.profile, args.budget_s,
                                 BUILD / "times" / args.profile)
            print(f"{path.stem}: {record['status']}, {cell(record)}, on {record['device']}",
                  flush=True)
            records.setdefault(args.profile, {})[path.stem] = record
            RECORDS.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    write_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main())
