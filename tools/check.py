"""Every check of the notebooks' form (:data:`CHECKS`), in one process; status 1 if one failed."""

import ast
import json
import re
import sys
import time
from pathlib import Path

from tools import compat, course_map, exercises, lessons, nbcheck, nbclean, shown
from tools.course import ROOT, notebook_paths, notebook_text

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


ROW = re.compile(r"^\| (\d\d) \| `(\w+)` \| ([^|]*) \|", re.M)  # README's | 04 | `epochs` | `50` |


def _defaults(node: ast.expr) -> list:
    """The values a parameter's default can take: one, or each branch of ``a if x else b``."""
    if isinstance(node, ast.IfExp):
        return _defaults(node.body) + _defaults(node.orelse)
    return [ast.literal_eval(node)]


def parameter_table(argv: list[str] | None = None) -> int:
    """README's parameter table: a row per notebook parameter, with its default(s), no more."""
    documented = {(nb, name): [ast.literal_eval(v) for v in re.findall(r"`([^`]*)`", column)]
                  for nb, name, column in ROW.findall((ROOT / "README.md").read_text())}
    actual = {}
    for path in notebook_paths():
        cells = json.loads(notebook_text(path))["cells"]
        cell = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
        for node in ast.parse("".join(cell["source"])).body:
            if isinstance(node, ast.AnnAssign):  # `name: type = value`, as tools.nbcheck requires
                actual[(path.stem[:2], node.target.id)] = _defaults(node.value)
    problems = [f"README's parameter table lacks {nb} `{name}`" for nb, name in actual
                if (nb, name) not in documented]
    problems += [f"README's parameter table has {nb} `{name}`, which the notebook has not"
                 for nb, name in documented if (nb, name) not in actual]
    problems += [f"README gives {nb} `{name}` the default {documented[nb, name]}, the notebook "
                 f"{values}" for (nb, name), values in actual.items()
                 if (nb, name) in documented
                 and sorted(map(repr, documented[nb, name])) != sorted(map(repr, values))]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


CHECKS = [
    ("nbclean --check", nbclean.main, ["--check"]), ("nbcheck", nbcheck.main, []),
    ("lessons --check", lessons.main, ["--check"]), ("shown", shown.main, []),
    ("exercises --check", exercises.main, ["--check"]),
    ("course_map readme --check", course_map.main, ["readme", "--check"]),
    ("compat readme --check", compat.main, ["readme", "--check"]),
    ("check.references", references, []), ("check.parameter_table", parameter_table, []),
]


def main() -> int:
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
