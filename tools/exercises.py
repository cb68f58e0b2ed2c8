"""The exercises: check they are well formed, and write the notebooks with their solutions.

    python -m tools.exercises --check        # make check-notebooks
    python -m tools.exercises [--out DIR]    # make solutions: DIR/NN_name.ipynb, solved
    python -m tools.exercises --notes        # the list in docs/instructor_notes.md

Each notebook's "## Exercises" section holds two to four exercises (helpers/exercises). An
exercise is a code cell whose first line is ``# Exercise NN.k: title``; the next code cell checks
it with ``exercises.check("NN.k", ...)``. Its solution is the block under the same line in
``solutions/NN_name.py``: learners opening a notebook do not see it. A solution notebook is the
notebook with each exercise cell replaced by its solution block; ``make test`` runs those copies
(on the compat stack) and requires every check to pass, and runs the notebooks themselves
(on the pinned stack) and requires every check to say "not yet".
"""

from __future__ import annotations

import argparse
import ast
import builtins
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from helpers.exercises import load_checks
from tools.course import BUILD, ROOT, notebook_paths, read_notebook, write_between

SOLUTIONS = ROOT / "solutions"
NOTES = ROOT / "docs" / "instructor_notes.md"
START, END = "<!-- exercises:start -->", "<!-- exercises:end -->"
MARKER = re.compile(r"^# Exercise (\d\d)\.(\d+): (.+)$")
PER_NOTEBOOK = (2, 4)  # how many exercises each notebook has, at least and at most


@dataclass(frozen=True)
class Block:
    id: str
    title: str
    source: str


def marker(source: str) -> tuple[str, str] | None:
    """``(id, title)`` if ``source`` opens with an exercise's first line."""
    found = MARKER.match(source.split("\n", 1)[0])
    return (f"{found[1]}.{found[2]}", found[3].strip()) if found else None


def solution_blocks(path: Path) -> list[Block]:
    """The blocks of a solutions file, each from its ``# Exercise NN.k: title`` line on."""
    chunks: list[list[str]] = []
    for line in path.read_text().splitlines():
        if MARKER.match(line):
            chunks.append([line])
        elif chunks:
            chunks[-1].append(line)
    return [Block(*marker(c[0]), "\n".join(c).rstrip()) for c in chunks]


def solution_functions(notebook: str, **names) -> dict:
    """The functions (and imports) the solutions of ``notebook`` (a stem) define, run with
    ``names`` as the notebook's earlier cells (``tf=...``); the rest of each block, which uses
    the notebook's own data, is left out. For the unit tests of the checks: they test the
    solutions learners are given, not copies of them."""
    space = dict(names)
    for block in solution_blocks(SOLUTIONS / f"{notebook}.py"):
        tree = ast.parse(block.source)
        tree.body = [n for n in tree.body
                     if isinstance(n, ast.FunctionDef | ast.Import | ast.ImportFrom)]
        exec(compile(tree, f"solutions/{notebook}.py", "exec"), space)
    return space


def exercise_cells(nb) -> list[tuple[int, str, str]]:
    """``(cell index, id, title)`` of every exercise cell in ``nb``."""
    return [
        (i, *found)
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (found := marker(cell.source))
    ]


def solutions_file(notebook: Path) -> Path:
    return SOLUTIONS / f"{notebook.stem}.py"


def solution_notebook(path: Path):
    """The notebook at ``path`` with every exercise cell replaced by its solution."""
    nb = read_notebook(path)
    solved = copy.deepcopy(nb)
    blocks = {b.id: b for b in solution_blocks(solutions_file(path))}
    for index, id, _ in exercise_cells(nb):
        solved.cells[index].source = blocks[id].source
    return solved


def write_solutions(out: Path, paths: list[Path] | None = None) -> list[Path]:
    """Write every notebook's solution copy into ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths or notebook_paths():
        target = out / path.name
        nbformat.write(solution_notebook(path), target)
        written.append(target)
    return written


def _names(source: str) -> tuple[set[str], set[str]]:
    """``(bound, used)``: the names ``source`` binds anywhere (assignments, loops, imports,
    definitions, arguments) and the names it reads. IPython's ``%`` and ``!`` lines are left out;
    a cell that is not Python then (``%%writefile``) binds and reads nothing."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set(), set()
    bound, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, used


def undefined_names(nb, index: int, solution: str) -> list[str]:
    """The names ``solution`` reads that neither it, nor the code cells before cell ``index``
    of ``nb``, nor Python's builtins define: a solution that would fail with a NameError where
    it replaces the exercise (a helpers module renamed, say)."""
    defined = set(dir(builtins))
    for cell in nb.cells[:index]:
        if cell.cell_type == "code":
            defined |= _names(cell.source)[0]
    bound, used = _names(solution)
    return sorted(used - bound - defined)


def problems(paths: list[Path] | None = None) -> list[str]:
    """What is wrong with the exercises of the notebooks at ``paths`` (all by default)."""
    registry = load_checks()
    found: list[str] = []
    seen: set[str] = set()
    for path in paths or notebook_paths():
        nb = read_notebook(path)
        cells = exercise_cells(nb)
        number = path.stem[:2]
        ids = [id for _, id, _ in cells]
        low, high = PER_NOTEBOOK
        if not low <= len(ids) <= high:
            found.append(f"{path.name}: {len(ids)} exercises, expected {low} to {high}")
        if ids != [f"{number}.{k}" for k in range(1, len(ids) + 1)]:
            found.append(f"{path.name}: exercises {ids}, expected {number}.1, {number}.2, ...")
        headings = [i for i, c in enumerate(nb.cells)
                    if c.cell_type == "markdown" and c.source.startswith("## Exercises")]
        if cells and not (headings and headings[0] < cells[0][0]):
            found.append(f"{path.name}: no '## Exercises' heading before its first exercise")
        blocks = {}
        if solutions_file(path).exists():
            blocks = {b.id: b for b in solution_blocks(solutions_file(path))}
        elif cells:
            found.append(f"{path.name}: no solutions file solutions/{solutions_file(path).name}")
        for index, id, title in cells:
            seen.add(id)
            after = next((c for c in nb.cells[index + 1:] if c.cell_type == "code"), None)
            if after is None or f'exercises.check("{id}"' not in after.source:
                found.append(f"{path.name}: exercise {id} is not followed by its check cell, "
                             f'exercises.check("{id}", ...)')
            if id not in registry:
                found.append(f"{path.name}: exercise {id} has no check in helpers/exercises")
            elif registry[id].title != title:
                found.append(f"{path.name}: exercise {id} is titled {title!r} in the notebook, "
                             f"{registry[id].title!r} in helpers/exercises")
            if id not in blocks:
                found.append(f"{path.name}: exercise {id} has no solution")
            elif blocks[id].title != title:
                found.append(f"{path.name}: exercise {id} is titled {title!r} in the notebook, "
                             f"{blocks[id].title!r} in its solution")
            elif blocks[id].source.strip() == nb.cells[index].source.strip():
                found.append(f"{path.name}: exercise {id}'s solution is the exercise itself")
            elif missing := undefined_names(nb, index, blocks[id].source):
                found.append(f"{solutions_file(path).name}: solution {id} uses "
                             f"{', '.join(missing)}, which no cell before exercise {id} defines")
            if "..." not in nb.cells[index].source:
                found.append(f"{path.name}: exercise {id} has no placeholder (...) to complete")
        for id in sorted(set(blocks) - {id for _, id, _ in cells}):
            found.append(f"{solutions_file(path).name}: solution {id} has no exercise cell")
    if paths is None:
        for id in sorted(set(registry) - seen):
            found.append(f"helpers/exercises: check {id} has no exercise cell in any notebook")
    return found


def exercise_list() -> str:
    """The instructor notes' list: per notebook, each exercise with what its check catches."""
    registry = load_checks()
    lines = []
    for path in notebook_paths():
        nb = read_notebook(path)
        lines.append(f"\n**[{path.stem}](../notebooks/{path.name}#exercises)** "
                     f"([solutions](../solutions/{path.stem}.py))\n")
        for _, id, title in exercise_cells(nb):
            ex = registry.get(id)
            more = f" *Right* means: {ex.right} Hint: {ex.hint}" if ex else ""
            lines.append(f"- **{id}** {title}.{more}")
    return "\n".join(lines).strip()


def write_notes(check: bool = False) -> bool:
    """Put :func:`exercise_list` between the notes' markers; ``check``: only compare."""
    return write_between(NOTES, START, END, exercise_list(), check)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check the exercises")
    parser.add_argument("--notes", action="store_true", help="write the instructor notes' list")
    parser.add_argument("--out", type=Path, default=BUILD / "solutions")
    args = parser.parse_args(argv)
    if found := problems():
        print("\n".join(found), file=sys.stderr)
        return 1
    if args.notes:
        write_notes()
        return 0
    if args.check:
        if not write_notes(check=True):
            print("docs/instructor_notes.md lists other exercises: run "
                  "`python -m tools.exercises --notes`", file=sys.stderr)
            return 1
        count = sum(len(solution_blocks(solutions_file(p))) for p in notebook_paths())
        print(f"exercises: {count} in {len(notebook_paths())} notebooks, each with its check "
              "and its solution")
        return 0
    for path in write_solutions(args.out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
