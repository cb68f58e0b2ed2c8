"""Store notebooks clean: no outputs, normalised metadata, badge and install URLs from settings.

The first code cell, where it installs the course's helpers, is rewritten as
``tools.course.install_cell`` builds it, with its metadata ``tools.course.INSTALL_METADATA``.
The validation cell (the code cell right after the one tagged ``parameters``) stays out of the
learner's way: its first line is :data:`VALIDATION_TITLE` and its metadata
:data:`VALIDATION_METADATA`, a collapsed form on Colab and hidden source in Jupyter; both are
written here.

    python -m tools.nbclean [--check] [NOTEBOOK ...]

With ``--check`` nothing is written; the exit status is 1 if any notebook
would change (CI uses this). Without arguments: every course notebook.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

from tools.course import (
    INSTALL_CELL,
    INSTALL_METADATA,
    colab_url,
    install_cell,
    install_url,
    notebook_paths,
    notebook_text,
    settings,
)

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python"}
KEPT_CELL_METADATA = ("tags", "cellView", "jupyter")
#: Of a cell's ``jupyter`` metadata, only whether its source is hidden is kept.
KEPT_JUPYTER_METADATA = ("source_hidden",)
#: The validation cell's first line: Colab shows the cell as a collapsed form of this title.
VALIDATION_TITLE = '#@title Check the parameters { display-mode: "form" }'
#: The validation cell's metadata: a form on Colab, hidden source in Jupyter and VS Code.
VALIDATION_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}}
COLAB_URL_RE = re.compile(
    r"https://colab\.research\.google\.com/github/[^/\s]+/[^/\s]+/blob/[^/\s]+/notebooks/[^)\s\"']+"
)
INSTALL_TITLE = INSTALL_CELL.splitlines()[0]
INSTALL_URL_RE = re.compile(r"git\+https://github\.com/[^/\s]+/[^/@\s\"']+?\.git(@[^\s\"']+)?")


def clean(nb: dict, name: str, repository: str, ref: str) -> dict:
    """Return a cleaned copy of notebook JSON ``nb`` stored as ``notebooks/<name>``."""
    nb = copy.deepcopy(nb)
    meta = nb.get("metadata", {})
    colab = {"provenance": []}
    if "gpuType" in meta.get("colab", {}):
        colab["gpuType"] = meta["colab"]["gpuType"]
    clean_meta = {"colab": colab, "kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    if meta.get("accelerator"):
        clean_meta["accelerator"] = meta["accelerator"]
    nb["metadata"] = clean_meta
    nb["nbformat"], nb["nbformat_minor"] = 4, 5
    badge, install = colab_url(name, repository, ref), install_url(repository, ref)
    codes = [cell for cell in nb.get("cells", []) if cell["cell_type"] == "code"]
    validation = validation_cell(nb.get("cells", []))
    for index, cell in enumerate(nb.get("cells", [])):
        source = "".join(cell.get("source", ""))
        source = COLAB_URL_RE.sub(badge, source)
        source = INSTALL_URL_RE.sub(install, source)
        installs = cell in codes[:2] and (  # the 2nd code cell after one choosing the engine
            INSTALL_URL_RE.search(source) or source.startswith(INSTALL_TITLE))
        if installs:
            source = install_cell(repository, ref)  # as tools.course writes it
        if cell is validation:
            source = with_title(source)
        cell["source"] = source.splitlines(keepends=True)
        cell["metadata"] = kept_metadata(cell.get("metadata", {}))
        if cell is validation:
            cell["metadata"].update(copy.deepcopy(VALIDATION_METADATA))
        if installs:
            cell["metadata"] = copy.deepcopy(INSTALL_METADATA)
        if not cell.get("id"):  # a new cell: an id no other cell of this notebook has
            taken = {c.get("id") for c in nb.get("cells", [])}
            cell["id"] = next(f"cell-{index:02d}" + (f"-{n}" if n else "")
                              for n in range(len(taken) + 1)
                              if f"cell-{index:02d}" + (f"-{n}" if n else "") not in taken)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return nb


def validation_cell(cells: list[dict]) -> dict | None:
    """The code cell right after the one tagged ``parameters``, or None."""
    for index, cell in enumerate(cells[:-1]):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            following = cells[index + 1]
            return following if following["cell_type"] == "code" else None
    return None


def with_title(source: str) -> str:
    """``source`` with :data:`VALIDATION_TITLE` as its first line (replacing another
    ``#@title`` line there)."""
    first, newline, rest = source.partition("\n")
    if first.startswith("#@title"):
        return VALIDATION_TITLE + newline + rest if rest or newline else VALIDATION_TITLE
    return VALIDATION_TITLE + "\n" + source


def kept_metadata(meta: dict) -> dict:
    """The cell metadata a stored notebook keeps: tags, Colab's form view, hidden source."""
    kept = {k: v for k, v in meta.items() if k in KEPT_CELL_METADATA and v}
    if "jupyter" in kept:
        jupyter = {k: v for k, v in kept["jupyter"].items() if k in KEPT_JUPYTER_METADATA and v}
        if jupyter:
            kept["jupyter"] = jupyter
        else:
            del kept["jupyter"]
    return kept


def dumps(nb: dict) -> str:
    """The one stored form of a notebook: sorted keys, one-space indent, final newline."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report, write nothing")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    conf = settings()
    dirty = []
    for path in args.notebooks or notebook_paths():
        text = notebook_text(path)
        cleaned = dumps(clean(json.loads(text), path.name, conf["repository"], conf["ref"]))
        if cleaned != text:
            dirty.append(path)
            if not args.check:
                path.write_text(cleaned, encoding="utf-8")
    verb = "would be cleaned" if args.check else "cleaned"
    for path in dirty:
        print(f"{path}: {verb}")
    if args.check and dirty:
        print("Run `make clean-notebooks` and commit the result.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
