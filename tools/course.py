"""The course's settings, read from one place: ``[tool.course]`` in pyproject.toml.

Also where notebooks live, and the papermill parameter profiles in
``notebooks/profiles.toml``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import tomllib

if TYPE_CHECKING:  # the launcher of make gpu-check reads this module from a bare python3
    import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PROFILES_FILE = NOTEBOOKS / "profiles.toml"
BUILD = ROOT / "build"

#: The notebooks that run without TensorFlow, on the engines the free TPU runtimes ship, and the
#: modules each needs. `make test` and `make run` execute them in the TPU stack's kernel
#: (.venv-tpu, requirements-tpu.txt: Colab's TPU image, JAX, Keras and torch_xla, no
#: TensorFlow); every other notebook runs in the pinned stack's (.venv).
TPU_NOTEBOOKS = {"08_tpu_keras_jax": ("jax", "keras"), "09_tpu_pytorch_xla": ("torch_xla",)}
#: The kernel the TPU stack registers in .venv (`make venv-tpu`), for `make run`.
TPU_KERNEL = "course-tpu"


#: What an install may name: a release tag (v1, v0.2.0, v0.2.0rc1) or a commit, never a branch,
#: which moves (whoever pushes to it would run code in every learner's kernel, and a push mid-
#: session would put a notebook and its helpers out of step).
RELEASE_RE = re.compile(r"^(v\d+(\.\d+)*([a-z]+\d*)?|[0-9a-f]{7,40})$")


def release_problem(ref: str) -> str | None:
    """Why ``ref`` may not be what the notebooks install from, or None."""
    if RELEASE_RE.match(ref):
        return None
    return (f"release={ref!r} is not a release: name a tag such as 'v0.2.0' or a commit's hash "
            "(a branch moves; see 'Cutting a release' in docs/maintainers.md)")


def settings(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """``{"repository": "owner/name", "ref": "v0.1.0"}`` from pyproject.toml's
    ``[tool.course]`` (``repository``, ``release``); a release that is not a tag or a commit
    stops with one line."""
    with open(pyproject, "rb") as f:
        course = tomllib.load(f)["tool"]["course"]
    if (why := release_problem(course["release"])) is not None:
        raise SystemExit(f"pyproject.toml [tool.course] {why}")
    return {"repository": course["repository"], "ref": course["release"]}


def dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """``helpers``' dependencies, as pyproject.toml lists them."""
    with open(pyproject, "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def colab_url(notebook: str, repository: str, ref: str) -> str:
    """The "Open in Colab" URL of ``notebooks/<notebook>`` (a file name)."""
    return (
        f"https://colab.research.google.com/github/{repository}/blob/{ref}/notebooks/{notebook}"
    )


def install_url(repository: str, ref: str) -> str:
    """What ``pip install`` takes to install the helpers package from the repository."""
    return f"git+https://github.com/{repository}.git@{ref}"


#: The first code cell of every notebook (in a TPU notebook, the second), a Colab form:
#: tools.nbclean writes it (with the URL from ``[tool.course]``, so `make set-repo` changes
#: it), tools.nbcheck checks it, and tests/test_setup.py runs it. Where ``import helpers``
#: finds nothing (Colab, Kaggle), pip installs the course's release; its dependencies are
#: unversioned, so pip installs only those the runtime lacks and changes none it has. It stops
#: in one line (IPython shows a ``UsageError`` as its one line): with pip's own reason (git's
#: "fatal: ..." without a network, "error: pathspec ..." for a bad tag, pip's first "ERROR: ..."
#: without git or in a resolver conflict), or where ``import helpers`` finds another module
#: (ours names the distribution, ``fast-tf-course-helpers``, in helpers/__init__.py).
INSTALL_CELL = """\
#@title Set up: install the course's helpers { display-mode: "form" }
import importlib.util as iu, re, subprocess as sp, sys; from IPython.core.error import UsageError
out = open(s.origin).read() if (s := iu.find_spec("helpers")) else sp.getoutput(sys.executable +
    " -m pip install {url}")
if s and "fast-tf-course" not in out: raise UsageError(f"{s.origin} hides the course's helpers")
if err := re.findall(r"(?m)^ *(fatal.*|ERROR(?!: pip).*|error: p.*)", out): raise UsageError(err[0])
"""
#: The install cell's metadata: a form on Colab, hidden source in Jupyter, and no input on the
#: course site (myst-nb's tag).
INSTALL_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True},
                    "tags": ["remove-input"]}


def install_cell(repository: str, ref: str) -> str:
    """The install cell (:data:`INSTALL_CELL`) for the course published at ``repository``."""
    lines, line = [], '    "'
    for piece in (" -m pip install git+https://github.com/", f"{repository}.git", f"@{ref}"):
        if len(line) + len(piece) + len('")') > 100:  # a long name, a commit: split the string
            lines.append(line + '"')
            line = '    "'
        line += piece
    command = "\n".join([*lines, line + '")'])
    return INSTALL_CELL.replace('    " -m pip install {url}")', command)


def notebook_paths(folder: Path = NOTEBOOKS) -> list[Path]:
    """The course's notebooks, in order (``NN_name.ipynb``)."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


def needs(stem: str) -> tuple[str, ...]:
    """The modules a notebook's kernel must import: its engine's."""
    return TPU_NOTEBOOKS.get(stem, ("tensorflow",))


def runs_here(stem: str) -> bool:
    """Whether this interpreter has what the notebook ``stem`` needs (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in needs(stem))


def kernel_for(stem: str) -> str | None:
    """The kernel that runs notebook ``stem``: for a TPU notebook, the TPU stack's
    (:data:`TPU_KERNEL`, where TensorFlow is not installed) when this interpreter has
    TensorFlow and that kernel is registered; else this interpreter's ("python3") where it has
    the notebook's engine; None where nothing here can run it."""
    if stem in TPU_NOTEBOOKS and (importlib.util.find_spec("tensorflow") is not None
                                  or not runs_here(stem)) and _registered(TPU_KERNEL):
        return TPU_KERNEL
    return "python3" if runs_here(stem) else None


def _registered(kernel: str) -> bool:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(kernel)
    except NoSuchKernel:
        return False
    return True


#: The notebooks each stack's test stages execute: the TensorFlow ones on the pinned stack and on
#: the compat stack (Colab's GPU image), the TPU ones on the TPU stack, Colab's TPU image, where
#: TensorFlow is not installed (their solved exercises are judged by its unit tests).
STACKS = {
    "pinned": lambda stem: stem not in TPU_NOTEBOOKS,
    "compat": lambda stem: stem not in TPU_NOTEBOOKS,
    "tpu": lambda stem: stem in TPU_NOTEBOOKS,
}


def stack_notebooks(stack: str, folder: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks the ``stack``'s test stages execute (see :data:`STACKS`)."""
    if stack not in STACKS:
        raise SystemExit(f"COURSE_STACK={stack!r} is unknown: use one of {', '.join(STACKS)}")
    return [p for p in notebook_paths(folder) if STACKS[stack](p.stem)]


def profiles(path: Path = PROFILES_FILE) -> dict:
    """Parameter profiles: ``{"test": {nb: params}, "quick": {...}, "invalid": {...}}``."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def parameters_for(notebook: str, profile: str, path: Path = PROFILES_FILE) -> dict:
    """Parameters papermill injects for ``notebook`` (stem) under ``profile``.

    ``full`` injects nothing: each notebook's own defaults are its full run.
    """
    if profile == "full":
        return {}
    known = profiles(path)
    if profile not in known or profile == "invalid":
        raise SystemExit(f"PROFILE={profile!r} is unknown: use full, quick or test")
    return dict(known[profile].get(notebook, {}))


def write_between(path: Path, start: str, end: str, body: str, check: bool = False) -> bool:
    """Put ``body`` between the markers ``start`` and ``end`` in the file at ``path`` (a
    generated part of a hand-written page). With ``check``, write nothing and say whether it
    is already there."""
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path.name} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{start}\n{body}\n{end}{tail}"
    if check:
        return new == text
    path.write_text(new)
    return True



def heaviest_first(paths: list[Path], profile: str = "test") -> list[Path]:
    """``paths`` (notebooks, or executed copies named like them), the slowest first, by the
    times `python -m tools.course_map measure --profile PROFILE` recorded in
    docs/measured_times.json (the quick profile's where that one has none; unmeasured ones
    last, in course order). The test stages run them in this order, each sent to the first
    worker free, so that the longest starts first and the two workers finish together."""
    records = ROOT / "docs" / "measured_times.json"
    measured = json.loads(records.read_text()) if records.exists() else {}
    times = measured.get(profile) or measured.get("quick", {})
    return sorted(paths, key=lambda p: -times.get(p.stem, {}).get("wall_s", 0))


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.course heaviest-first FILE ...``: print them, the slowest first."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "heaviest-first":
        print("usage: python -m tools.course heaviest-first FILE ...", file=sys.stderr)
        return 2
    print(" ".join(str(p) for p in heaviest_first([Path(a) for a in args[1:]])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


@functools.cache
def _read(path: Path) -> tuple[str, float]:
    return path.read_text(encoding="utf-8"), path.stat().st_mtime


def folder_parameters(path: Path) -> list[str]:
    """The parameters of ``notebooks/<path>`` that its plumbing module's ``check_parameters``
    (called by its validation cell) checks with ``helpers.params.folder``: work folders it may
    empty, and so refuses where it did not make them."""
    cells = json.loads(notebook_text(path))["cells"]
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    module = re.search(r"(\w+)\.check_parameters\(", "".join(cells[tagged + 1]["source"]))[1]
    source = (ROOT / "helpers" / f"{module}.py").read_text()
    rules = source[source.index("def check_parameters("):]
    return re.findall(r"(\w+)=\(\1, (?:\w+\.)?folder\(", rules)


def notebook_text(path: Path) -> str:
    """The stored text of the notebook at ``path``, read from disk once per process while the
    file is unchanged (``python -m tools.check`` runs every notebook check on one reading)."""
    path = Path(path).resolve()
    text, mtime = _read(path)
    if path.stat().st_mtime != mtime:  # written since: read it again
        _read.cache_clear()
        text, _ = _read(path)
    return text


def notebook_json(path: Path) -> dict:
    """The notebook at ``path`` as plain JSON (a copy the caller may change)."""
    return json.loads(notebook_text(path))


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path`` as nbformat reads it (a copy the caller may change)."""
    return copy.deepcopy(_parsed(notebook_text(path)))


@functools.cache
def _parsed(text: str) -> nbformat.NotebookNode:
    import nbformat  # noqa: PLC0415  (here: see TYPE_CHECKING above)

    return nbformat.reads(text, as_version=4)


#: a cell of notebook 07 that writes (or appends to) its worker script:
#: ``%%writefile [-a] "{worker_py}"`` (quoted: a work_dir may hold spaces)
WRITEFILE = re.compile(r"^%%writefile(?:\s+-a)?\s+\S*worker\S*\s*$")


def worker_script(notebook) -> str:
    """The worker script that ``notebook`` (07's) writes with its ``%%writefile {worker_py}``
    cells, in order: what the tests and ``make bench`` run, so the notebook stays its one
    source."""
    nb = notebook_json(Path(notebook))
    parts = []
    for cell in nb["cells"]:
        first, _, body = "".join(cell["source"]).partition("\n")
        if cell["cell_type"] == "code" and WRITEFILE.match(first):
            parts.append(body.rstrip("\n") + "\n")
    if not parts:
        raise ValueError(f"{notebook} has no '%%writefile {{worker_py}}' cells")
    return "".join(parts)
