"""The course's settings, read from one place: ``[tool.course]`` in pyproject.toml.

Also where notebooks live, and the papermill parameter profiles in
``notebooks/profiles.toml``.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PROFILES_FILE = NOTEBOOKS / "profiles.toml"
BUILD = ROOT / "build"
COLAB_BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


def settings(pyproject: Path = ROOT / "pyproject.toml") -> dict:
    """``{"repository": "owner/name", "branch": "main"}`` from pyproject.toml."""
    with open(pyproject, "rb") as f:
        course = tomllib.load(f)["tool"]["course"]
    return {"repository": course["repository"], "branch": course.get("branch", "main")}


def colab_url(notebook: str, repository: str, branch: str) -> str:
    """The "Open in Colab" URL of ``notebooks/<notebook>`` (a file name)."""
    return (
        f"https://colab.research.google.com/github/{repository}/blob/{branch}/notebooks/{notebook}"
    )


def install_url(repository: str, branch: str) -> str:
    """What ``pip install`` takes to install the helpers package from the repository."""
    return f"git+https://github.com/{repository}.git@{branch}"


#: The first code cell of every notebook: tools.nbclean writes it (with the URL from
#: ``[tool.course]``, so `make set-repo` changes it), tools.nbcheck checks it, and
#: tests/test_setup.py runs it. It needs nothing but Python and pip: it installs the course's
#: ``helpers`` where ``import helpers`` would not give them (missing, or another module of that
#: name: ours names ``fast-tf-course-helpers`` in helpers/__init__.py), and where that fails it
#: says why in one line (IPython shows a ``UsageError`` as its one line, and the cell fails).
INSTALL_CELL = """\
import importlib.util
import subprocess
import sys

URL = "{url}"
def course_helpers():  # does `import helpers` give this course's package, not another module?
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("helpers")
    return spec and spec.origin and "fast-tf-course-helpers" in open(spec.origin).read()
if not course_helpers():  # Colab, Kaggle: install it (TensorFlow stays the runtime's own)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", URL], capture_output=True)
    if not course_helpers():  # say why in one line, and stop "Run all" here
        from IPython.core.error import UsageError
        raise UsageError(f"{importlib.util.find_spec('helpers').origin} hides the course's helpers"
                         if pip.returncode == 0 else f"pip could not install {URL}: no network"
                         " (Kaggle: turn Internet on), or not published there (`make set-repo`)")
"""


def install_cell(repository: str, branch: str) -> str:
    """The install cell (:data:`INSTALL_CELL`) for the course published at ``repository``."""
    return INSTALL_CELL.replace("{url}", install_url(repository, branch))


def notebook_paths(folder: Path = NOTEBOOKS) -> list[Path]:
    """The course's notebooks, in order (``NN_name.ipynb``)."""
    return sorted(p for p in folder.glob("[0-9][0-9]_*.ipynb"))


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
    is already there. Used by tools/course_map.py (README) and tools/exercises.py (notes)."""
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



def heaviest_first(paths: list[Path]) -> list[Path]:
    """``paths`` (notebooks, or executed copies named like them), the slowest first, by the
    quick-profile times `python -m tools.course_map measure` recorded in
    docs/measured_times.json (unmeasured ones last, in course order). The test stages run
    them in this order, so that the longest starts first and the two workers finish together.
    Used by tests/test_notebooks.py and the Makefile's nbval stage."""
    import json

    records = ROOT / "docs" / "measured_times.json"
    quick = json.loads(records.read_text()).get("quick", {}) if records.exists() else {}
    return sorted(paths, key=lambda p: -quick.get(p.stem, {}).get("wall_s", 0))


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.course heaviest-first FILE ...``: print them, the slowest first."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "heaviest-first":
        print("usage: python -m tools.course heaviest-first FILE ...", file=sys.stderr)
        return 2
    print(" ".join(str(p) for p in heaviest_first([Path(a) for a in args[1:]])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
