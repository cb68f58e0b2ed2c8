"""The compat stack is Colab's image: move it in one command, and keep README's table true.

    python -m tools.compat set --date 2026-08 --source SOURCE --python 3.13 NAME==VERSION ...
    python -m tools.compat readme [--check]

``set`` rewrites requirements-compat.txt's pins (CPU builds), then README's versions table.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tools.course import ROOT, write_between

COMPAT = ROOT / "requirements-compat.txt"
PINNED = ROOT / "requirements.txt"
TPU = ROOT / "requirements-tpu.txt"
README = ROOT / "README.md"
BEGIN, END = "# Colab's image: begin", "# Colab's image: end"
START, STOP = "<!-- versions: begin -->", "<!-- versions: end -->"
CPU_BUILDS = {"tensorflow": "tensorflow-cpu", "jax": "jax[cpu]"}  # the same releases
ROWS = [  # the label, the names that give it, and what a stack that pins none has
    ("TensorFlow", ("tensorflow-cpu", "tensorflow"), "none"),
    ("Keras", ("keras",), "none"),
    ("JAX", ("jax[cpu]", "jax"), "none"),
    ("NumPy", ("numpy",), "not pinned"),
    ("torch / torch-xla", ("torch", "torch-xla"), "none"),
    ("ipykernel", ("ipykernel",), "not pinned"),
    ("IPython", ("ipython",), "not pinned"),
]
PIN = re.compile(r"^([A-Za-z0-9_.\[\]-]+)==([^\s#]+)")


def pins(path: Path) -> dict[str, str]:
    lines = (PIN.match(line.strip()) for line in path.read_text().splitlines())
    return {m[1].lower(): m[2] for m in lines if m}


def header(path: Path, key: str) -> str:
    """A ``# key: value`` line's value in ``path`` ("" if none)."""
    m = re.search(rf"(?m)^# {key}: (.+)$", path.read_text())
    return m[1].strip() if m else ""


def table() -> str:
    stacks = [pins(COMPAT), pins(PINNED), pins(TPU)]
    rows = [f"| | Colab's CPU/GPU image ({header(COMPAT, 'date')}; {header(COMPAT, 'source')}): "
            "the compat stack, `.venv-compat` | the pinned stack, `.venv` | Colab's TPU image: "
            "the TPU stack, `.venv-tpu` |", "|---|---|---|---|",
            f"| Python | {header(COMPAT, 'python')} | 3.11 | {header(TPU, 'python') or '3.12'} |"]
    for label, names, absent in ROWS:
        cells = [" / ".join(stack[n] for n in names if n in stack) or absent for stack in stacks]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def set_image(date: str, source: str, python: str, packages: list[str]) -> None:
    if not re.match(r"^3\.\d+$", python):
        raise SystemExit(f"--python={python!r}: expected a minor release such as 3.13")
    lines = [f"# date: {date}", f"# source: {source}", f"# python: {python}"]
    for spec in packages:
        if not (m := PIN.match(spec)):
            raise SystemExit(f"{spec!r} is not name==version")
        lines.append(f"{CPU_BUILDS.get(m[1].lower(), m[1].lower())}=={m[2]}")
    write_between(COMPAT, BEGIN, END, "\n".join(lines))
    write_between(README, START, STOP, table())
    print(f"{COMPAT.name} and README: Colab's image of {date}, Python {python}; now `make test`")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compat",
                                     description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    moved = sub.add_parser("set", help="move the compat stack to Colab's image")
    for option in ("--date", "--source", "--python"):
        moved.add_argument(option, required=True)
    moved.add_argument("packages", nargs="+")
    sub.add_parser("readme", help="write README's versions table").add_argument(
        "--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "set":
        set_image(args.date, args.source, args.python, args.packages)
    elif not write_between(README, START, STOP, table(), check=args.check):
        print("README.md's versions table is stale: run `python -m tools.compat readme`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
