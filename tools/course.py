"""The course's settings (``[tool.course]`` in pyproject.toml), its notebooks and their readers,
and the papermill parameter profiles (``notebooks/profiles.toml``)."""

import importlib.util
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
BUILD = ROOT / "build"

#: The notebooks that run without TensorFlow (the TPU images), and the engines each needs.
TPU_NOTEBOOKS = {"09_tpu_keras_jax": ("jax", "keras"), "10_tpu_pytorch_xla": ("torch_xla",),
                 "11_tpu_scale": ("jax", "keras")}
TPU_KERNEL = "course-tpu"  # the kernel `make venv-tpu` registers in .venv, for `make run`

#: What an install may name: a release tag (v1, v0.2.0, v0.2.0rc1) or a commit, never a branch.
RELEASE_RE = re.compile(r"^(v\d+(\.\d+)*([a-z]+\d*)?|[0-9a-f]{7,40})$")


def release_problem(ref: str) -> str | None:
    """Why ``ref`` may not be what the notebooks install from, or None."""
    if RELEASE_RE.match(ref):
        return None
    return (f"release={ref!r} is not a release: name a tag such as 'v0.2.0' or a commit's hash "
            "(a branch moves; see 'Cutting a release' in docs/maintainers.md)")


def settings() -> dict:
    """``{"repository", "ref"}`` from pyproject.toml's ``[tool.course]``, a release checked."""
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["course"]
    if (why := release_problem(course["release"])) is not None:
        raise SystemExit(f"pyproject.toml [tool.course] {why}")
    return {"repository": course["repository"], "ref": course["release"]}


def colab_url(notebook: str, repository: str, ref: str) -> str:
    return f"https://colab.research.google.com/github/{repository}/blob/{ref}/notebooks/{notebook}"


def install_url(repository: str, ref: str) -> str:
    return f"git+https://github.com/{repository}.git@{ref}"


#: The first code cell of every notebook (a TPU notebook's second): unless pip's metadata records
#: pyproject.toml's version and no other, it installs that release; then it imports what Python
#: finds and checks its version. Each check that fails stops in one line.
INSTALL_CELL = """\
#@title Set up: install the course's helpers { display-mode: "form" }
import re
import subprocess
import sys
from importlib import import_module, metadata, util

from IPython.core.error import UsageError

release = "<version>"  # this notebook's release of the course's helpers
url = <url>
imported = sys.modules.get("helpers")  # by an earlier cell: pip would not replace it
if imported and getattr(imported, "__version__", "") != release:
    raise UsageError(f"This kernel imported {imported.__file__}: restart the runtime first")
found = util.find_spec("helpers")
if found and "fast-tf-course" not in open(found.origin).read():
    raise UsageError(f"{found.origin} hides the course's helpers")
if {d.version for d in metadata.distributions(name="fast-tf-course-helpers")} != {release}:
    pip = subprocess.getoutput(f"{sys.executable} -m pip install {url}")
    failed = re.findall(r"(?m)^ *(fatal.*|ERROR(?!: pip).*|error: p.*)", pip)
    if failed:
        raise UsageError(failed[0])
helpers = import_module("helpers")
if helpers.__version__ != release:  # a copy earlier on the path, or pip installed elsewhere
    raise UsageError(f"{helpers.__file__} is helpers {helpers.__version__}, this notebook needs "
                     f"{release}: remove it or run %pip install {url}, then restart the runtime")
"""
INSTALL_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True},
                    "tags": ["remove-input"]}  # a form on Colab, hidden in Jupyter, on the site


def version() -> str:
    """The course's version (pyproject.toml's, which ``helpers.__version__`` reads installed)."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def install_cell(repository: str, ref: str) -> str:
    url = f'"{install_url(repository, ref)}"'
    if len(f"url = {url}") > 100:  # a long name, a commit: the string on two lines
        url = f'("git+https://github.com/{repository}.git"\n       "@{ref}")'
    return INSTALL_CELL.replace("<version>", version()).replace("<url>", url)


def notebook_paths(folder: Path = NOTEBOOKS) -> list[Path]:
    """The course's notebooks, in order (``NN_name.ipynb``)."""
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def runs_here(stem: str) -> bool:
    """Whether this interpreter has the modules notebook ``stem`` needs (nothing is imported)."""
    return all(importlib.util.find_spec(n) for n in TPU_NOTEBOOKS.get(stem, ("tensorflow",)))


def kernel_for(stem: str) -> str | None:
    """:data:`TPU_KERNEL` for a TPU notebook where needed and registered, else "python3" or None."""
    if stem in TPU_NOTEBOOKS and (importlib.util.find_spec("tensorflow") or not runs_here(stem)):
        from jupyter_client.kernelspec import find_kernel_specs

        if TPU_KERNEL in find_kernel_specs():
            return TPU_KERNEL
    return "python3" if runs_here(stem) else None


#: True: its tests run the TPU notebooks (tpu: Colab's TPU image; tpu-kaggle: Kaggle's)
STACKS = {"pinned": False, "compat": False, "tpu": True, "tpu-kaggle": True}


def stack_notebooks(stack: str) -> list[Path]:
    if stack not in STACKS:
        raise SystemExit(f"COURSE_STACK={stack!r} is unknown: use one of {', '.join(STACKS)}")
    return [p for p in notebook_paths() if (p.stem in TPU_NOTEBOOKS) == STACKS[stack]]


def profiles() -> dict:
    """Parameter profiles: ``{"test": {nb: params}, "quick": {...}, "invalid": {...}}``."""
    return tomllib.loads((NOTEBOOKS / "profiles.toml").read_text())


def parameters_for(notebook: str, profile: str) -> dict:
    """What papermill injects into ``notebook`` (a stem) under ``profile``; nothing for full."""
    if profile == "full":
        return {}
    known = profiles()
    if profile not in known or profile == "invalid":
        raise SystemExit(f"PROFILE={profile!r} is unknown: use full, quick or test")
    return dict(known[profile].get(notebook, {}))


def write_between(path: Path, start: str, end: str, body: str, check: bool = False) -> bool:
    """Put ``body`` between ``start`` and ``end`` in ``path`` (``check``: only say if it is)."""
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path.name} has no {start} ... {end} markers")
    head, rest = text.split(start, 1)
    new = f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"
    if check:
        return new == text
    path.write_text(new)
    return True


def notebook_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


WRITEFILE = re.compile(r"^%%writefile(?:\s+-a)?\s+\S*worker\S*\s*$")


def worker_script(notebook) -> str:
    """The worker script 08's ``%%writefile {worker_py}`` cells write, for the tests and bench."""
    parts = []
    for cell in notebook_json(notebook)["cells"]:
        first, _, body = "".join(cell["source"]).partition("\n")
        if cell["cell_type"] == "code" and WRITEFILE.match(first):
            parts.append(body.rstrip("\n") + "\n")
    if not parts:
        raise ValueError(f"{notebook} has no '%%writefile {{worker_py}}' cells")
    return "".join(parts)
