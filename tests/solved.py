"""The exercises' given solutions as code: the unit tests of the checks test what learners get."""

import ast
from pathlib import Path

from tools import exercises


def solution_functions(notebook: str, **names) -> dict:
    """The functions and imports of ``notebook``'s solutions (a stem), run with ``names`` as
    its earlier cells."""
    space = dict(names)
    for block in exercises.solution_blocks(Path(notebook)).values():
        tree = ast.parse(block.source)
        tree.body = [n for n in tree.body
                     if isinstance(n, ast.FunctionDef | ast.Import | ast.ImportFrom)]
        exec(compile(tree, f"solutions/{notebook}.py", "exec"), space)
    return space
