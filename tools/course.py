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
    """What ``%pip install`` takes to install the helpers package from the repository."""
    return f"git+https://github.com/{repository}.git@{branch}"


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
