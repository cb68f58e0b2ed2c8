"""The package's import structure: no cycle between modules (counting imports inside
functions too), and every module imports on its own in a fresh interpreter."""

import ast
import subprocess
import sys

import pytest

from tools.course import ROOT

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools

HELPERS = sorted(p for p in (ROOT / "helpers").rglob("*.py") if "__pycache__" not in p.parts)
# The TPU notebooks' modules need JAX or torch_xla (the TPU stack); tests/test_tpu_* import them
NEEDS_ENGINE = ("tpu_keras_jax", "tpu_pytorch_xla", "nb09", "nb10")
LESSONS = "helpers.lessons"


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path) -> set[str]:
    """The helpers modules ``path`` imports, anywhere in it."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    known = {module_name(p) for p in HELPERS}
    return {m for m in found if m in known and m != here and m != "helpers"}


def test_no_import_cycle():
    graph = {module_name(p): imported(p) for p in HELPERS}
    cycles, done = [], set()

    def visit(node, stack):
        if node in stack:
            cycles.append(" -> ".join(stack[stack.index(node):] + [node]))
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, stack + [node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    assert not cycles, "import cycles: " + "; ".join(sorted(set(cycles)))


def test_lessons_import_the_plumbing_never_the_other_way_round():
    """The one import direction between generated and hand-written code (docs/maintainers.md):
    a lesson (helpers/lessons, a notebook's #@save cells) may import hand-written modules; no
    hand-written module or exercise check imports a lesson: where one needs a notebook's code,
    the notebook passes it in (07's set_gpu_memory, 08's advice)."""
    wrong = [f"{module_name(p)} imports {m}" for p in HELPERS
             if not module_name(p).startswith(LESSONS + ".")
             for m in sorted(imported(p)) if m.startswith(LESSONS)]
    assert not wrong, wrong


# Imports each module in a child forked from an interpreter that has imported no helpers
# module (only the third-party libraries they build on, which are not under test here): any
# module that works only after another was imported first fails there.
ALONE = """
import importlib, os, sys
import numpy, scipy, matplotlib, PIL  # noqa: F401  (not under test: forked children share them)
failed = []
for names in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            for name in names.split(","):
                importlib.import_module(name)
        except BaseException as error:
            print(f"{name}: {type(error).__name__}: {error}", flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(names)
print("failed:", " ".join(failed))
"""


def test_each_module_imports_alone_in_a_fresh_interpreter():
    names = [module_name(p) for p in HELPERS if not module_name(p).endswith(NEEDS_ENGINE)]
    # the lessons are notebook cells that import TensorFlow (seconds each): one child for all
    lessons = ",".join(n for n in names if n.startswith("helpers.lessons."))
    alone = [n for n in names if not n.startswith("helpers.lessons.")] + [lessons]
    done = subprocess.run([sys.executable, "-c", ALONE, *alone], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("failed:"), done.stdout[-3000:]
