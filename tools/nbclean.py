"""Store notebooks clean: no outputs, normalised metadata, badge and install URLs from settings.

It also writes the install cell and folds the validation cell away.
"""

import argparse
import copy
import json
import re
import sys

from tools import course

KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
VALIDATION_TITLE = '#@title Check the parameters { display-mode: "form" }'
VALIDATION_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}}
COLAB_URL_RE = re.compile(
    r"https://colab\.research\.google\.com/github/[^/\s]+/[^/\s]+/blob/[^/\s]+/notebooks/[^)\s\"']+"
)
INSTALL_TITLE = course.INSTALL_CELL.splitlines()[0]
INSTALL_URL_RE = re.compile(r"git\+https://github\.com/[^/\s]+/[^/@\s\"']+?\.git(@[^\s\"']+)?")


def clean(nb: dict, name: str, repository: str, ref: str) -> dict:
    """A cleaned copy of notebook JSON ``nb`` stored as ``notebooks/<name>``."""
    nb, meta = copy.deepcopy(nb), nb.get("metadata", {})
    colab = {"provenance": []} | {k: v for k, v in meta.get("colab", {}).items() if k == "gpuType"}
    nb["metadata"] = {"colab": colab, "kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    if meta.get("accelerator"):
        nb["metadata"]["accelerator"] = meta["accelerator"]
    nb["nbformat"], nb["nbformat_minor"] = 4, 5
    cells = nb.get("cells", [])
    codes = [cell for cell in cells if cell["cell_type"] == "code"]
    validation = next((after for cell, after in zip(cells, cells[1:], strict=False)
                       if "parameters" in cell.get("metadata", {}).get("tags", [])), None)
    taken = {c.get("id") for c in cells}
    for index, cell in enumerate(cells):
        source = "".join(cell.get("source", ""))
        source = COLAB_URL_RE.sub(course.colab_url(name, repository, ref), source)
        source = INSTALL_URL_RE.sub(course.install_url(repository, ref), source)
        old = cell.get("metadata", {})  # kept: tags, Colab's form view, hidden source
        metadata = {k: v for k, v in old.items() if k in ("tags", "cellView") and v}
        if old.get("jupyter", {}).get("source_hidden"):
            metadata["jupyter"] = {"source_hidden": True}
        installs = INSTALL_URL_RE.search(source) or source.startswith(INSTALL_TITLE)
        if installs and cell in codes[:2]:  # the 2nd code cell after one choosing the engine
            source = course.install_cell(repository, ref)
            metadata = copy.deepcopy(course.INSTALL_METADATA)
        elif cell is validation and cell["cell_type"] == "code":
            first, newline, rest = source.partition("\n")
            source = (VALIDATION_TITLE + newline + rest if first.startswith("#@title")
                      else VALIDATION_TITLE + "\n" + source)
            metadata |= copy.deepcopy(VALIDATION_METADATA)
        cell["source"], cell["metadata"] = source.splitlines(keepends=True), metadata
        if not cell.get("id"):  # a new cell: an id no other cell of this notebook has
            ids = (f"cell-{index:02d}" + (f"-{n}" if n else "") for n in range(len(cells) + 1))
            cell["id"] = next(id for id in ids if id not in taken)
            taken.add(cell["id"])
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return nb


def dumps(nb: dict) -> str:
    """The one stored form of a notebook: sorted keys, one-space indent, final newline."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    conf = course.settings()
    for path in course.notebook_paths():
        text = path.read_text(encoding="utf-8")
        cleaned = dumps(clean(json.loads(text), path.name, conf["repository"], conf["ref"]))
        if cleaned != text:
            print(f"{path}: cleaned")
            path.write_text(cleaned, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
