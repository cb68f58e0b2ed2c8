"""The compat stack is Colab's image: move it in one command, and keep README's table true.

    python -m tools.compat set --date 2026-08 --source "googlecolab/backend-info" \\
        --python 3.13 tensorflow==2.20.0 keras==3.13.2 numpy==2.1.3 jax==0.7.2 \\
        ipykernel==6.17.1 ipython==7.34.0
    python -m tools.compat readme [--check]

``set`` rewrites the block of requirements-compat.txt between its ``# Colab's image`` markers
(``tensorflow`` becomes ``tensorflow-cpu``, ``jax`` becomes ``jax[cpu]``: the CPU builds of the
same releases), with the image's date, source and Python, then README's versions table. The
Makefile reads the Python from that block, so `make test` then builds .venv-compat on it.
``readme`` writes the table from the three requirements files; ``--check`` (in ``make
check-notebooks``) fails where README differs from them.
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
#: A pin's name as the CPU-only machines install it (the same release, without CUDA).
CPU_BUILDS = {"tensorflow": "tensorflow-cpu", "jax": "jax[cpu]"}
#: The table's rows: its label, the package names that give it, and what a stack that pins none
#: of them has (an engine it lacks, or a package it takes as its dependencies' resolver chose).
ROWS = [
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
    """``{name: version}`` of a requirements file's ``name==version`` lines."""
    found = {}
    for line in path.read_text().splitlines():
        if m := PIN.match(line.strip()):
            found[m[1].lower()] = m[2]
    return found


def header(path: Path, key: str) -> str:
    """A ``# key: value`` line's value in the Colab block of ``path`` ("" if none)."""
    m = re.search(rf"(?m)^# {key}: (.+)$", path.read_text())
    return m[1].strip() if m else ""


def colab_block(date: str, source: str, python: str, packages: list[str]) -> str:
    """The lines between the markers, for ``packages`` (``name==version``)."""
    lines = [f"# date: {date}", f"# source: {source}", f"# python: {python}"]
    for spec in packages:
        m = PIN.match(spec)
        if not m:
            raise SystemExit(f"{spec!r} is not name==version")
        lines.append(f"{CPU_BUILDS.get(m[1].lower(), m[1].lower())}=={m[2]}")
    return "\n".join(lines) + "\n"


def table() -> str:
    """README's versions table, from the three requirements files."""
    compat, pinned, tpu = pins(COMPAT), pins(PINNED), pins(TPU)
    python = header(COMPAT, "python")
    head = (f"| | Colab's CPU/GPU image ({header(COMPAT, 'date')}; {header(COMPAT, 'source')}): "
            "the compat stack, `.venv-compat` | the pinned stack, `.venv` | Colab's TPU image: "
            "the TPU stack, `.venv-tpu` |")
    rows = [head, "|---|---|---|---|",
            f"| Python | {python} | 3.11 | {header(TPU, 'python') or '3.12'} |"]
    for label, names, absent in ROWS:
        cells = []
        for stack in (compat, pinned, tpu):
            found = [stack[n] for n in names if n in stack]
            cells.append(" / ".join(found) if found else absent)
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def set_image(date: str, source: str, python: str, packages: list[str]) -> None:
    if not re.match(r"^3\.\d+$", python):
        raise SystemExit(f"--python={python!r}: expected a minor release such as 3.13")
    text = COMPAT.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{COMPAT.name} has no {BEGIN!r} ... {END!r} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    COMPAT.write_text(head + BEGIN + "\n" + colab_block(date, source, python, packages)
                      + END + tail)
    write_between(README, START, STOP, table())
    print(f"{COMPAT.name}: Colab's image of {date} on Python {python}; README's table written. "
          "Next: `make test` (it builds .venv-compat again) and commit.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compat", description=__doc__.split(
        "\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    moved = sub.add_parser("set", help="move the compat stack to Colab's image")
    moved.add_argument("--date", required=True)
    moved.add_argument("--source", required=True)
    moved.add_argument("--python", required=True)
    moved.add_argument("packages", nargs="+")
    readme = sub.add_parser("readme", help="write README's versions table")
    readme.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "set":
        set_image(args.date, args.source, args.python, args.packages)
        return 0
    if write_between(README, START, STOP, table(), check=args.check) is False:
        print("README.md's versions table differs from the requirements files: run "
              "`python -m tools.compat readme`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
