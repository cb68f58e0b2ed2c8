"""Check every notebook against the course's conventions.

    python -m tools.nbcheck [NOTEBOOK ...]

Conventions (from tensorflow/docs, d2l, keras-io, nbdev): an H1 title first;
an "Open in Colab" badge whose URL ends with the notebook's own path; ``##
Setup``; exactly one ``parameters`` cell with the validation cell right after
it, validating every parameter, collapsed (a ``#@title`` form on Colab, hidden source in
Jupyter: ``tools.nbclean`` writes both); ``## Summary`` and ``## Next steps``; short
code cells, the first of them the install cell (``tools.course.INSTALL_CELL``); each parameter
written ``name: type = value  # what it is``, as ``papermill --help-notebook`` reads it; no
harness marker (``noqa``, ``NBVAL_...``, ``type: ignore``) in a code cell;
an introduction saying what the reader will learn ("You will:" and a list) and its
prerequisites (``**Prerequisites:**``, earlier notebooks only); ``## Exercises`` and
``## Further reading``; the last code cell printing how long the run took; a ``python3``
kernelspec with ``language_info``; stored clean; one statement per line and sorted imports in
every code cell but the install cell (a six-line form that pyproject.toml's ruff settings let
join statements: ruff runs here on the notebooks without it). Every
parameter also needs at least one invalid value in ``notebooks/profiles.toml``,
so the test suite proves it is rejected.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.course import (
    ROOT,
    TPU_NOTEBOOKS,
    colab_url,
    install_cell,
    notebook_paths,
    notebook_text,
    profiles,
    settings,
)
from tools.nbclean import INSTALL_TITLE, VALIDATION_METADATA, VALIDATION_TITLE, clean, dumps

NAME_RE = re.compile(r"^\d\d_[a-z0-9]+(_[a-z0-9]+)*\.ipynb$")
MAX_CODE_LINES = 25
#: what only the test harness or the linter reads, never a learner: none in a code cell
MARKERS = re.compile(r"#\s*(noqa\b|NBVAL_|type:\s*ignore)")


def source(cell: dict) -> str:
    return "".join(cell.get("source", ""))


def parameter_names(cell_source: str) -> list[str]:
    """Names assigned at top level in a parameters cell."""
    names = []
    for node in ast.parse(cell_source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def checked_parameters(cell_source: str) -> set[str] | None:
    """The names a validation cell passes as ``name=name`` to its one call,
    ``params = <module>.check_parameters(...)``; None if it is not that."""
    try:
        body = ast.parse(cell_source).body
    except SyntaxError:
        return None
    if len(body) != 1 or not isinstance(body[0], ast.Assign):
        return None
    call = body[0].value
    if (not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute)
            or call.func.attr != "check_parameters" or [ast.unparse(t) for t in body[0].targets]
            != ["params"]):
        return None
    return {k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == k.arg}


def helpers_imports(cell_source: str) -> list[str]:
    """The import statements of ``helpers`` (or its modules) in a cell, as written."""
    try:
        tree = ast.parse(cell_source)
    except SyntaxError:
        return []
    found = []
    for node in tree.body:
        modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                   else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(m == "helpers" or m.startswith("helpers.") for m in modules):
            found.append(ast.unparse(node))
    return found


def headings(cells: list[dict]) -> list[str]:
    return [
        line.strip()
        for cell in cells
        if cell["cell_type"] == "markdown"
        for line in source(cell).splitlines()
        if line.startswith("#")
    ]


def check_notebook(path: Path, text: str, conf: dict, known_profiles: dict) -> list[str]:
    """Problems with one notebook, as sentences; empty when it follows the conventions."""
    problems = []
    name = path.name
    if not NAME_RE.match(name):
        problems.append("name must be NN_snake_case.ipynb")
    nb = json.loads(text)
    cells = nb.get("cells", [])
    ids = [c.get("id") for c in cells]
    if repeated := sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"cell ids must be unique (nbformat renames repeats at random): {repeated}")
    if not cells or cells[0]["cell_type"] != "markdown" or not source(cells[0]).startswith("# "):
        problems.append("first cell must be markdown starting with an H1 title ('# ...')")
    url = colab_url(name, conf["repository"], conf["ref"])
    if not any(url in source(c) and "colab-badge" in source(c) for c in cells[:3]):
        problems.append(f"an 'Open in Colab' badge linking to {url} must be in the first cells")
    codes = [c for c in cells if c["cell_type"] == "code"]
    install = install_cell(conf["repository"], conf["ref"])
    if path.stem in TPU_NOTEBOOKS and codes and _chooses_engine(source(codes[0])):
        codes_after = codes[1:]  # the engine is chosen first, before anything imports it
    else:
        codes_after = codes
    if not codes_after or source(codes_after[0]) != install:
        problems.append("the first code cell must be the install cell of tools/course.py (in "
                        "a TPU notebook, the cell right after the one that chooses the engine)")
    if len(codes_after) > 1 and len(imported := helpers_imports(source(codes_after[1]))) > 2:
        problems.append(f"the imports cell (after the install cell) imports helpers "
                        f"{len(imported)} times (at most 2: `from helpers import ...`, one more)")
    if any("helpers.params" in line for c in codes for line in helpers_imports(source(c))):
        problems.append("a cell imports helpers.params: the rules live in the notebook's plumbing "
                        "module (check_parameters)")
    heads = headings(cells)
    for wanted in ("## Setup", "## Exercises", "## Further reading", "## Summary", "## Next steps"):
        if wanted not in heads:
            problems.append(f"missing the heading '{wanted}'")
    problems += _check_intro(cells, name)
    if not codes or "This run took " not in source(codes[-1]):
        problems.append("the last code cell must print how long the run took ('This run took')")
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    if len(tagged) != 1:
        problems.append(f"exactly one cell must be tagged 'parameters' (found {len(tagged)})")
    else:
        problems += _check_parameters(cells, tagged[0], name, known_profiles)
    marked = [c.get("id") for c in codes if MARKERS.search(source(c))]
    if marked:
        problems.append(f"harness markers (noqa, NBVAL, type: ignore) in learner cells {marked}: "
                        "use a cell tag (nbval-check-output) or pyproject.toml's ruff settings")
    for i, cell in enumerate(cells):
        lines = len(source(cell).splitlines())
        if cell["cell_type"] == "code" and lines > MAX_CODE_LINES:
            problems.append(f"code cell {i} has {lines} lines (at most {MAX_CODE_LINES})")
    meta = nb.get("metadata", {})
    if meta.get("kernelspec", {}).get("name") != "python3" or "language_info" not in meta:
        problems.append("metadata needs kernelspec 'python3' and language_info")
    if dumps(clean(nb, name, conf["repository"], conf["ref"])) != text:
        problems.append("not stored clean (outputs, metadata or URLs): run `make clean-notebooks`")
    return problems


def _chooses_engine(code: str) -> bool:
    """A TPU notebook's first cell: it sets environment variables that an engine reads once
    (KERAS_BACKEND, XLA_FLAGS, PJRT_DEVICE...) and imports nothing but ``os`` and ``glob``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    froms = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return "os.environ[" in code and not froms and imported <= {"os", "glob"}


def _check_intro(cells, name) -> list[str]:
    """What the reader learns ("You will:" and a list) and what comes first: a line
    "**Prerequisites:** ..." naming only earlier notebooks (or "none")."""
    intro = "\n".join(source(c) for c in cells[:3] if c["cell_type"] == "markdown")
    problems = []
    if not re.search(r"you will( learn)?:\n\n?- ", intro, re.IGNORECASE):
        problems.append("the introduction must list what the reader will learn ('You will:', "
                        "then a bulleted list)")
    found = re.search(r"^\*\*Prerequisites:\*\* (.+)$", intro, re.MULTILINE)
    if not found:
        problems.append("the introduction must state its prerequisites ('**Prerequisites:** ...')")
    else:
        later = [n for n in re.findall(r"\b(\d\d)\b", found[1]) if n >= name[:2]]
        if later:
            problems.append(f"prerequisites may name earlier notebooks only, not {later}")
    return problems


def _check_parameters(cells, index, name, known_profiles) -> list[str]:
    problems = []
    params_cell = cells[index]
    if params_cell["cell_type"] != "code":
        return ["the 'parameters' cell must be a code cell"]
    try:
        names = parameter_names(source(params_cell))
    except SyntaxError as error:
        return [f"the parameters cell does not parse: {error}"]
    if not names:
        problems.append("the parameters cell assigns no parameters")
    from papermill.translators import PythonTranslator  # what --help-notebook reads

    shown = {p.name: p for p in PythonTranslator.inspect({"source": source(params_cell)})}
    unread = [n for n in names if n not in shown or shown[n].inferred_type_name == "None"
              or not shown[n].help]
    if unread:
        problems.append(f"papermill --help-notebook cannot read {', '.join(unread)}: write "
                        "`name: type = value  # what it is`, with no '=' in the comment")
    following = cells[index + 1] if index + 1 < len(cells) else None
    passed = checked_parameters(source(following)) if following else None
    if following is None or following["cell_type"] != "code" or passed is None:
        problems.append("the cell right after 'parameters' must be one call, `params = "
                        "<plumbing module>.check_parameters(name=name, ...)`")
    else:
        unchecked = [n for n in names if n not in passed]
        if unchecked:
            problems.append(f"parameters not validated: {', '.join(unchecked)}")
        if source(following).partition("\n")[0] != VALIDATION_TITLE:
            problems.append(f"the validation cell's first line must be {VALIDATION_TITLE}")
        meta = following.get("metadata", {})
        if any(meta.get(k) != v for k, v in VALIDATION_METADATA.items()):
            problems.append(
                f"the validation cell's metadata must include {VALIDATION_METADATA} "
                "(a form on Colab, hidden source elsewhere)"
            )
    stem = name.removesuffix(".ipynb")
    invalid = known_profiles.get("invalid", {}).get(stem, {})
    untested = [n for n in names if not invalid.get(n)]
    if untested:
        problems.append(
            f"no invalid values in profiles.toml [invalid.{stem}] for: {', '.join(untested)}"
        )
    for profile in ("test", "quick", "invalid"):
        unknown = set(known_profiles.get(profile, {}).get(stem, {})) - set(names)
        if unknown:
            problems.append(
                f"profiles.toml [{profile}.{stem}] names unknown parameters: "
                + ", ".join(sorted(unknown))
            )
    if stem not in known_profiles.get("test", {}):
        problems.append(f"profiles.toml has no [test.{stem}] (small parameters for the tests)")
    return problems


#: What pyproject.toml's ruff settings allow notebooks for the install cell alone.
INSTALL_CELL_ONLY = "E401,E701,E702,I001"


def joined_statements(paths: list[Path]) -> dict[Path, list[str]]:
    """Per notebook, ruff's :data:`INSTALL_CELL_ONLY` findings in its code cells other than the
    install cell, as problems (one ruff run over copies without that cell)."""
    found: dict[Path, list[str]] = {path: [] for path in paths}
    with tempfile.TemporaryDirectory() as folder:
        copies = {}
        for index, path in enumerate(paths):
            nb = json.loads(notebook_text(path))
            nb["cells"] = [c for c in nb["cells"] if not source(c).startswith(INSTALL_TITLE)]
            copy = Path(folder) / f"{index:03d}_{path.name}"
            copy.write_text(json.dumps(nb))
            copies[str(copy)] = path
        ran = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
             "--config", str(ROOT / "pyproject.toml"), "--config", "lint.per-file-ignores = {}",
             "--select", INSTALL_CELL_ONLY, folder], capture_output=True, text=True)
    for line in ran.stdout.splitlines():
        name, _, finding = line.partition(":")
        if name in copies:
            found[copies[name]].append(f"ruff: {finding.strip()}")
    if ran.returncode not in (0, 1) or (ran.returncode and not any(found.values())):
        raise SystemExit(f"ruff could not check the notebooks: {ran.stderr or ran.stdout}")
    return found


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])] or notebook_paths()
    conf, known = settings(), profiles()
    failed = 0
    joined = joined_statements(paths)
    for path in paths:
        problems = check_notebook(path, notebook_text(path), conf, known) + joined[path]
        failed += bool(problems)
        for problem in problems:
            print(f"{path}: {problem}")
    print(f"notebook check: {len(paths) - failed} passed, {failed} failed")
    return 1 if failed or not paths else 0


if __name__ == "__main__":
    sys.exit(main())
