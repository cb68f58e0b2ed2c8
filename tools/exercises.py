"""The exercises: check their form, and write the notebooks with their solutions.

    python -m tools.exercises --check        # make check-notebooks
    python -m tools.exercises [--out DIR]    # make solutions: DIR/NN_name.ipynb, solved
    python -m tools.exercises --notes        # docs/instructor_notes.md's table and list (--corpus)
"""

import argparse
import ast
import builtins
import json
import re
import sys
from collections import namedtuple
from pathlib import Path

import nbformat

from helpers.exercises import load_checks
from tools.course import BUILD, ROOT, notebook_paths, write_between

SOLUTIONS = ROOT / "solutions"
NOTES = ROOT / "docs" / "instructor_notes.md"
MARKS = "<!-- exercises:start -->", "<!-- exercises:end -->"
CORPUS = ROOT / "docs" / "exercise_corpus.json"  # per make target: its tests' answers per exercise
MARKER = re.compile(r"^# Exercise (\d\d)\.(\d+): (.+)$")
PER_NOTEBOOK = (2, 4)  # how many exercises each notebook has, at least and at most
Block = namedtuple("Block", "id title source")


def marker(source: str) -> tuple[str, str] | None:
    """``(id, title)`` if ``source`` opens with an exercise's first line."""
    found = MARKER.match(source.split("\n", 1)[0])
    return (f"{found[1]}.{found[2]}", found[3].strip()) if found else None


def solution_blocks(notebook: Path) -> dict[str, Block]:
    text = (SOLUTIONS / f"{notebook.stem}.py").read_text()
    chunks = re.split(r"(?m)^(?=# Exercise \d\d\.\d+: )", text)
    return {found[0]: Block(*found, c.rstrip()) for c in chunks if (found := marker(c))}


def exercise_cells(nb) -> list[tuple[int, str, str]]:
    """``(cell index, id, title)`` of every exercise cell in ``nb``."""
    return [(i, *found) for i, cell in enumerate(nb.cells)
            if cell.cell_type == "code" and (found := marker(cell.source))]


def solution_notebook(path: Path):
    solved, blocks = nbformat.read(path, as_version=4), solution_blocks(path)  # read afresh
    for index, id, _ in exercise_cells(solved):
        solved.cells[index].source = blocks[id].source
    return solved


def write_solutions(out: Path, paths: list[Path] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for path in paths or notebook_paths():
        nbformat.write(solution_notebook(path), out / path.name)
    return [out / path.name for path in paths or notebook_paths()]


def _names(source: str) -> tuple[set[str], set[str]]:
    """``(bound, used)``: the names ``source`` binds and reads, outside ``%`` and ``!`` lines."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set(), set()
    bound, used = set(), set()
    for node in ast.walk(tree):  # a def's, class's, except's, match's name, an argument's
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(name := node.arg if isinstance(node, ast.arg) else
                        getattr(node, "name", None), str):
            bound.add(name)
    return bound, used


def undefined_names(nb, index: int, solution: str) -> list[str]:
    """The names ``solution`` reads that neither it, earlier code cells nor builtins define."""
    defined = set(dir(builtins)).union(*(_names(c.source)[0] for c in nb.cells[:index]
                                         if c.cell_type == "code"))
    bound, used = _names(solution)
    return sorted(used - bound - defined)


def problems(paths: list[Path] | None = None) -> list[str]:
    registry, found, seen = load_checks(), [], set()
    for path in paths or notebook_paths():
        nb, name, solutions = nbformat.read(path, as_version=4), path.name, f"{path.stem}.py"
        cells = exercise_cells(nb)
        ids, number, (low, high) = [id for _, id, _ in cells], path.stem[:2], PER_NOTEBOOK
        if not low <= len(ids) <= high:
            found.append(f"{name}: {len(ids)} exercises, expected {low} to {high}")
        if ids != [f"{number}.{k}" for k in range(1, len(ids) + 1)]:
            found.append(f"{name}: exercises {ids}, expected {number}.1, {number}.2, ...")
        if cells and not any(c.cell_type == "markdown" and c.source.startswith("## Exercises")
                             for c in nb.cells[:cells[0][0]]):
            found.append(f"{name}: no '## Exercises' heading before its first exercise")
        blocks = solution_blocks(path) if (SOLUTIONS / solutions).exists() else {}
        for index, id, title in cells:
            seen.add(id)
            after = next((c for c in nb.cells[index + 1:] if c.cell_type == "code"), None)
            if after is None or f'exercises.check("{id}"' not in after.source:
                found.append(f"{name}: exercise {id} is not followed by its check cell")
            if (has := getattr(registry.get(id), "title", None)) != title:
                found.append(f"{name}: exercise {id} has {has and 'another title' or 'no check'} "
                             "in helpers/exercises")
            if id not in blocks:
                found.append(f"{name}: exercise {id} has no solution in solutions/{solutions}")
            elif blocks[id].title != title:
                found.append(f"{name}: exercise {id} has another title in its solution")
            elif blocks[id].source.strip() == nb.cells[index].source.strip():
                found.append(f"{name}: exercise {id}'s solution is the exercise itself")
            elif missing := undefined_names(nb, index, blocks[id].source):
                found.append(f"{solutions}: solution {id} uses {', '.join(missing)}, which no "
                             f"cell before exercise {id} defines")
            if "..." not in nb.cells[index].source:
                found.append(f"{name}: exercise {id} has no placeholder (...) to complete")
        found += [f"{solutions}: solution {id} has no exercise cell"
                  for id in sorted(set(blocks) - set(ids))]
    if paths is None:
        found += [f"helpers/exercises: check {id} has no exercise cell in any notebook"
                  for id in sorted(set(registry) - seen)]
    return found


def exercise_list(counts: dict[str, str]) -> str:
    """The notes' table of ``counts`` (``{id: "right/wrong"}``), then each exercise's check."""
    registry, lines, rows = load_checks(), [], ["| notebook | right / wrong answers |", "|---|---|"]
    for path in notebook_paths():
        cells = exercise_cells(nbformat.read(path, as_version=4))
        rows.append(f"| {path.stem[:2]} | {', '.join(f'{i}: {counts[i]}' for _, i, _ in cells)} |")
        lines.append(f"\n**[{path.stem}](../notebooks/{path.name}#exercises)** "
                     f"([solutions](../solutions/{path.stem}.py))\n")
        for _, id, title in cells:
            ex = registry.get(id)
            more = f" *Right* means: {ex.right} Hint: {ex.hint}" if ex else ""
            lines.append(f"- **{id}** {title}.{more}")
    return "\n".join(rows + lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check the exercises")
    parser.add_argument("--notes", "--corpus", action="store_true", help="write them, counted")
    parser.add_argument("--out", type=Path, default=BUILD / "solutions")
    args = parser.parse_args(argv)
    if args.notes:  # the counts of the last runs of make unit, tpu-unit (tests/conftest.py)
        runs = {p.stem: json.loads(p.read_text()) for p in BUILD.glob("exercise-corpus/*.json")}
        CORPUS.write_text(json.dumps(json.loads(CORPUS.read_text()) | runs, indent=1) + "\n")
    notes, runs = args.notes or args.check, json.loads(CORPUS.read_text()).values()
    counts = {ex: f"{c['right']}/{c['wrong']}" for run in runs for ex, c in run.items()}
    found = problems() + [f"exercise {ex} has no answers counted in {CORPUS.name}: run `make unit`"
                          f" and `make tpu-unit`, then `python -m tools.exercises --corpus`"
                          for ex in sorted(set(load_checks()) - set(counts)) if notes]
    thin = {ex: c for run in runs for ex, c in run.items() if c["right"] < 3 or c["wrong"] < 4}
    found += [f"exercise {ex}: {c['right']} right and {c['wrong']} wrong answers in its tests; "
              "at least 3 and 4" for ex, c in thin.items() if notes]
    if not found and notes and not write_between(NOTES, *MARKS, exercise_list(counts), args.check):
        found = ["docs/instructor_notes.md is stale: run `python -m tools.exercises --notes`"]
    if found or notes:
        print("\n".join(found) or f"exercises: {len(load_checks())}, each with its cell, check, "
              "solution and answers counted", file=sys.stderr if found else sys.stdout)
        return 1 if found else 0
    for path in write_solutions(args.out):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
