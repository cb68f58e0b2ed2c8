"""The compat stack is Colab's image: move it in one command, and keep README's table true.

    python -m tools.compat set --date 2026-08 --source SOURCE --python 3.13 NAME==VERSION ...
    python -m tools.compat readme [--check]

``set`` rewrites requirements-compat.txt's pins (CPU builds), then README's versions table.
"""

import argparse
import re
import sys
from pathlib import Path

from tools.course import ROOT, write_between

COMPAT = ROOT / "requirements-compat.txt"
PINNED = ROOT / "requirements.txt"
TPU = ROOT / "requirements-tpu.txt"
KAGGLE_TPU = ROOT / "requirements-tpu-kaggle.txt"
README = ROOT / "README.md"
BEGIN, END = "# Colab's image: begin", "# Colab's image: end"
START, STOP = "<!-- versions: begin -->", "<!-- versions: end -->"
CPU_BUILDS = {"tensorflow": "tensorflow-cpu", "jax": "jax[cpu]"}  # the same releases
ROWS = [  # the label, the names that give it, and what a stack that pins none has
    ("TensorFlow", ("tensorflow-cpu", "tensorflow"), "none"),
    ("Keras", ("keras",), "none"),
    ("JAX", ("jax[cpu]", "jax"), "none"),
    ("NumPy", ("numpy",), "not pinned"),
    ("torch / torch-xla", ("torch", "torch-xla"), "no torch-xla"),
    ("ipykernel", ("ipykernel",), "not pinned"),
    ("IPython", ("ipython",), "not pinned"),
]
PIN = re.compile(r"^([A-Za-z0-9_.\[\]-]+)==([^\s#]+)")
#: Kaggle's GPU image, which no stack copies: Colab's image of 2026-05 (Kaggle/docker-python's
#: Dockerfile.tmpl, runtime:release-colab-external-images_20260514) as Colab's pip-freeze.gpu.txt
#: of 2026-05-08 lists it, on Python 3.12
KAGGLE_GPU = {"tensorflow": "2.20.0", "keras": "3.13.2", "jax": "0.7.2", "numpy": "2.0.2",
              "ipykernel": "6.17.1", "ipython": "7.34.0"}
#: A column per runtime: its name, what the learner sets there, the notebooks that run there
RUNTIMES = [
    ("Colab, CPU or GPU", "*Runtime > Change runtime type*: T4 GPU (or CPU)", "01-08"),
    ("Kaggle, GPU T4 x2", "*Settings > Accelerator*: GPU T4 x2; *Internet* on (to install)",
     "01-08 (06 and 08 use both GPUs)"),
    ("Colab, TPU v5e-1", "*Runtime > Change runtime type*: v5e-1 TPU", "09-11"),
    ("Kaggle, TPU v5e-8", "*Settings > Accelerator*: TPU v5e-8; *Internet* on (to install)",
     "09-11"),
    ("`make run` here", "nothing (the CPU)", "01-08; 09-11 in the Colab TPU stack's kernel"),
]


def pins(path: Path) -> dict[str, str]:
    lines = (PIN.match(line.strip()) for line in path.read_text().splitlines())
    return {m[1].lower(): m[2] for m in lines if m}


def header(path: Path, key: str) -> str:
    """A ``# key: value`` line's value in ``path`` ("" if none)."""
    m = re.search(rf"(?m)^# {key}: (.+)$", path.read_text())
    return m[1].strip() if m else ""


def table() -> str:
    stacks = [pins(COMPAT), KAGGLE_GPU, pins(TPU), pins(KAGGLE_TPU), pins(PINNED)]
    pythons = [header(path, "python") for path in (COMPAT, COMPAT, TPU, KAGGLE_TPU, PINNED)]
    image = f"{header(COMPAT, 'date')}; {header(COMPAT, 'source')}"
    tested = [f"the compat stack, `.venv-compat` ({image})",
              "no stack: Colab's image of 2026-05, on Python 3.12",
              f"the Colab TPU stack, `.venv-tpu` ({header(TPU, 'date')} image)",
              f"the Kaggle TPU stack, `.venv-tpu-kaggle` ({header(KAGGLE_TPU, 'date')} image)",
              "the pinned stack, `.venv` (the newest releases)"]
    rows = ["| | " + " | ".join(name for name, _, _ in RUNTIMES) + " |",
            "|---" * (len(RUNTIMES) + 1) + "|",
            "| What to set | " + " | ".join(s for _, s, _ in RUNTIMES) + " |",
            "| Notebooks | " + " | ".join(n for _, _, n in RUNTIMES) + " |",
            "| `make test` runs it as | " + " | ".join(tested) + " |",
            "| Python | " + " | ".join([pythons[0], "3.12", *pythons[2:]]) + " |"]
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
