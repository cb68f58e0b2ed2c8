"""Every check of the notebooks' form (:data:`CHECKS`), in one process; status 1 if one failed."""

import ast
import re
import sys
import time
from itertools import zip_longest
from pathlib import Path

from tools import compat, course_map, exercises, lessons, nbcheck, shown
from tools.course import ROOT, notebook_json, notebook_paths, write_between
from tools.gpu_check import table

#: The docs: each `helpers.x.y`, `tools.x` (in backquotes or not) and `make x` there must exist.
DOCS = ["README.md", "CHANGELOG.md", "docs/instructor_notes.md", "docs/maintainers.md",
        "notebooks/profiles.toml", "requirements.txt", "requirements-compat.txt",
        "requirements-tpu.txt", "requirements-tpu-kaggle.txt"]
NAME = re.compile(r"\b((?:helpers|tools)(?:\.\w+)+)")
TARGET = re.compile(r"`make ([a-z][\w-]*)")


def _defines(module: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    text = module.read_text()
    names = set(lessons.defined_names(text))
    for node in ast.parse(text).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def resolves(dotted: str) -> bool:
    """Whether ``helpers.x.y`` names a module, or a name defined in one (read, not imported)."""
    parts, path = dotted.split("."), ROOT
    for index, part in enumerate(parts):
        if (path / part).is_dir():
            path = path / part
            continue
        if (path / f"{part}.py").is_file():
            module = path / f"{part}.py"
        elif index and (path / "__init__.py").is_file():
            module, index = path / "__init__.py", index - 1
        else:
            return False
        rest = parts[index + 1:]
        return not rest or rest[0] in _defines(module)
    return True


def references(argv: list[str] | None = None) -> int:
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    stale = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        stale += [f"{doc}: {name}" for name in sorted(set(NAME.findall(text)))
                  if not name.endswith(".py") and not resolves(name)]
        stale += [f"{doc}: make {t}" for t in sorted(set(TARGET.findall(text)) - targets)]
    for line in stale:
        print(f"names nothing: {line}")
    return 1 if stale else 0


START, END = "<!-- parameters: begin -->", "<!-- parameters: end -->"  # README's table


def parameter_rows() -> list[str]:
    """README's parameter table: a row per parameter of each notebook's parameters cell, as
    `papermill --help-notebook` reads it (name, type, default, comment)."""
    from papermill.translators import PythonTranslator  # heavy: only this check needs it

    rows = []
    for path in notebook_paths():
        cells = notebook_json(path)["cells"]
        cell = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
        rows += [[path.stem[:2], f"`{p.name}`", f"`{p.inferred_type_name}`", f"`{p.default}`",
                  p.help] for p in PythonTranslator.inspect({"source": "".join(cell["source"])})]
    return table(["Notebook", "Parameter", "Type", "Default", "What it is"], rows)


def parameter_table(argv: list[str] | None = None) -> int:
    """Write README's parameter table (``python -m tools.check parameters``); ``--check``: fail,
    naming the first row that differs, where README's is not what this would write."""
    rows, readme = parameter_rows(), ROOT / "README.md"
    if not argv:
        write_between(readme, START, END, "\n".join(rows))
        return 0
    shown = readme.read_text().partition(START + "\n")[2].partition("\n" + END)[0]
    for have, want in zip_longest(shown.splitlines(), rows, fillvalue="(no row)"):
        if have != want:
            print(f"README's parameter table has\n  {have}\nwhere the notebooks' parameters "
                  f"cells give\n  {want}\nRun `python -m tools.check parameters`.")
            return 1
    return 0


CHECKS = [
    ("nbcheck", nbcheck.main, []),
    ("lessons --check", lessons.main, ["--check"]), ("shown", shown.main, []),
    ("exercises --check", exercises.main, ["--check"]),
    ("course_map readme --check", course_map.main, ["readme", "--check"]),
    ("compat readme --check", compat.main, ["readme", "--check"]),
    ("check.references", references, []),
    ("check.parameter_table --check", parameter_table, ["--check"]),
]


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv) == ["parameters"]:  # write README's table
        return parameter_table()
    failed = []
    for name, check, argv in CHECKS:
        start = time.perf_counter()
        status = check(argv)
        print(f"== tools.{name}: {'passed' if status == 0 else 'FAILED'} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
        if status:
            failed.append(name)
    if failed:
        print(f"notebook checks that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
