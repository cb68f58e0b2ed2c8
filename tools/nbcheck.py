"""Check every notebook against the course's conventions (docs/maintainers.md, stage 2)."""

import ast
import json
import re
import sys
from pathlib import Path

from tools import course
from tools.lessons import defined_names
from tools.nbclean import VALIDATION_METADATA, VALIDATION_TITLE, clean, dumps

NAME_RE = re.compile(r"^\d\d_[a-z0-9]+(_[a-z0-9]+)*\.ipynb$")
MAX_CODE_LINES = 25
MARKERS = re.compile(r"#\s*(noqa\b|NBVAL_|type:\s*ignore)")  # for tools, not for learners
HEADINGS = ("## Setup", "## Exercises", "## Further reading", "## Summary", "## Next steps")


def source(cell: dict) -> str:
    return "".join(cell.get("source", ""))


def _body(code: str) -> list[ast.stmt]:
    try:
        return ast.parse(code).body
    except SyntaxError:
        return []


def checked_parameters(cell_source: str) -> set[str] | None:
    """The ``name=name`` arguments of ``params = <module>.check_parameters(...)``, or None."""
    body = _body(cell_source)
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Assign) else None
    if (not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute)
            or call.func.attr != "check_parameters"
            or [ast.unparse(t) for t in body[0].targets] != ["params"]):
        return None
    return {k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == k.arg}


def helpers_imports(cell_source: str) -> list[str]:
    statements = map(ast.unparse, _body(cell_source))
    return [line for line in statements if re.match(r"(from|import) helpers\b", line)]


def _chooses_engine(code: str) -> bool:
    """A TPU notebook's first cell: sets ``os.environ`` and imports only os, glob and sys."""
    nodes = [n for node in _body(code) for n in ast.walk(node)]
    imported = {a.name for n in nodes if isinstance(n, ast.Import) for a in n.names}
    return (bool(nodes) and "os.environ[" in code and imported <= {"os", "glob", "sys"}
            and not any(isinstance(n, ast.ImportFrom) for n in nodes))


def check_notebook(path: Path, text: str, conf: dict, known_profiles: dict) -> list[str]:
    name, nb = path.name, json.loads(text)
    cells, meta = nb.get("cells", []), nb.get("metadata", {})
    ids = [c.get("id") for c in cells]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    url = course.colab_url(name, conf["repository"], conf["ref"])
    codes = [c for c in cells if c["cell_type"] == "code"]
    chooses = path.stem in course.TPU_NOTEBOOKS and codes and _chooses_engine(source(codes[0]))
    after = codes[1:] if chooses else codes
    imported = helpers_imports(source(after[1])) if len(after) > 1 else []
    heads = {line.strip() for c in cells if c["cell_type"] == "markdown"
             for line in source(c).splitlines() if line.startswith("#")}
    intro = "\n".join(source(c) for c in cells[:3] if c["cell_type"] == "markdown")
    found = re.search(r"^\*\*Prerequisites:\*\* (.+)$", intro, re.MULTILINE)
    later = [n for n in re.findall(r"\b(\d\d)\b", found[1]) if n >= name[:2]] if found else []
    marked = [c.get("id") for c in codes if MARKERS.search(source(c))]
    lengths = [(i, len(source(c).splitlines())) for i, c in enumerate(cells)
               if c["cell_type"] == "code"]
    rules = [
        (not NAME_RE.match(name), "name must be NN_snake_case.ipynb"),
        (repeated, f"cell ids must be unique: {repeated}"),
        (not cells or cells[0]["cell_type"] != "markdown" or not source(cells[0]).startswith("# "),
         "first cell must be markdown with an H1 title ('# ...')"),
        (not any(url in source(c) and "colab-badge" in source(c) for c in cells[:3]),
         f"an 'Open in Colab' badge linking to {url} must be in the first cells"),
        (not after or source(after[0]) != course.install_cell(conf["repository"], conf["ref"]),
         "the first code cell (a TPU notebook's second) must be the install cell"),
        (len(imported) > 2, f"the imports cell imports helpers {len(imported)} times (at most 2)"),
        (any("helpers.params" in line for c in codes for line in helpers_imports(source(c))),
         "a cell imports helpers.params: use the plumbing module's checks"),
        *[(h not in heads, f"missing the heading '{h}'") for h in HEADINGS],
        (not re.search(r"you will( learn)?:\n\n?- ", intro, re.IGNORECASE),
         "the introduction must list what the reader will learn ('You will:')"),
        (not found, "the introduction must state its prerequisites ('**Prerequisites:**')"),
        (later, f"prerequisites may name earlier notebooks only, not {later}"),
        (not codes or "This run took " not in source(codes[-1]),
         "the last code cell must print how long the run took"),
        (marked, f"harness markers (noqa, NBVAL, type: ignore) in cells {marked}"),
        *[(n > MAX_CODE_LINES, f"code cell {i} has {n} lines (at most {MAX_CODE_LINES})")
          for i, n in lengths],
        (meta.get("kernelspec", {}).get("name") != "python3" or "language_info" not in meta,
         "metadata needs kernelspec 'python3' and language_info"),
        (dumps(clean(nb, name, conf["repository"], conf["ref"])) != text,
         "not stored clean (outputs, metadata or URLs): run `make clean-notebooks`"),
    ]
    problems = [message for broken, message in rules if broken]
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    if len(tagged) != 1:
        return [*problems, f"exactly one cell must be tagged 'parameters' (found {len(tagged)})"]
    return problems + _check_parameters(cells, tagged[0], path.stem, known_profiles)


def _check_parameters(cells, index, stem, known_profiles) -> list[str]:
    from papermill.translators import PythonTranslator  # what --help-notebook reads

    cell = cells[index]
    if cell["cell_type"] != "code":
        return ["the 'parameters' cell must be a code cell"]
    try:
        names = defined_names(source(cell))
    except SyntaxError as error:
        return [f"the parameters cell does not parse: {error}"]
    shown = {p.name: p for p in PythonTranslator.inspect({"source": source(cell)})}
    unread = [n for n in names if n not in shown or not shown[n].help
              or shown[n].inferred_type_name == "None"]
    following = cells[index + 1] if index + 1 < len(cells) else {"cell_type": "none"}
    passed = checked_parameters(source(following))
    invalid = known_profiles.get("invalid", {}).get(stem, {})
    untested = [n for n in names if not invalid.get(n)]
    problems = [message for broken, message in [
        (not names, "the parameters cell assigns no parameters"),
        (unread, f"papermill --help-notebook cannot read {', '.join(unread)}: write "
                 "`name: type = value  # what it is`"),
        (untested, f"no invalid values in profiles.toml [invalid.{stem}] for: "
                   + ", ".join(untested)),
        (stem not in known_profiles.get("test", {}), f"profiles.toml has no [test.{stem}]"),
    ] if broken]
    if following["cell_type"] != "code" or passed is None:
        problems.append("the cell after 'parameters' must be one call, `params = "
                        "<module>.check_parameters(name=name, ...)`")
    else:
        if unchecked := [n for n in names if n not in passed]:
            problems.append(f"parameters not validated: {', '.join(unchecked)}")
        if source(following).partition("\n")[0] != VALIDATION_TITLE:
            problems.append(f"the validation cell's first line must be {VALIDATION_TITLE}")
        if any(following["metadata"].get(k) != v for k, v in VALIDATION_METADATA.items()):
            problems.append(f"the validation cell's metadata must include {VALIDATION_METADATA}")
    for profile in ("test", "quick", "invalid"):
        if unknown := set(known_profiles.get(profile, {}).get(stem, {})) - set(names):
            problems.append(f"profiles.toml [{profile}.{stem}] names unknown parameters: "
                            + ", ".join(sorted(unknown)))
    return problems


def main(argv: list[str] | None = None) -> int:
    paths = course.notebook_paths()
    conf, known = course.settings(), course.profiles()
    failed = 0
    for path in paths:
        problems = check_notebook(path, path.read_text(encoding="utf-8"), conf, known)
        failed += bool(problems)
        for problem in problems:
            print(f"{path}: {problem}")
    print(f"notebook check: {len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
