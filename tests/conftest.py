"""Shared test setup: never reach for the network, and quiet TensorFlow."""

import itertools
import json
import os
import re
import signal
import textwrap
from pathlib import Path
from types import SimpleNamespace

os.environ["COURSE_OFFLINE"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

from helpers import exercises, processes  # noqa: E402
from helpers.logs import import_tensorflow  # noqa: E402
from tools import course  # noqa: E402


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported quietly."""
    return import_tensorflow()


@pytest.fixture(scope="session")
def fresh_process(tmp_path_factory):
    """``run(code=..., script=..., args=(), timeout=300)``: Python ``code`` (a string) or a
    ``script`` in a process of its own, where TensorFlow is imported but was never started, so
    its devices and memory settings are still open, as in a new ``python`` (the course's fork
    server, helpers.processes: TensorFlow is imported once per test worker, not once per
    test). Returns ``returncode`` (``-9`` if SIGKILLed) and ``output`` (stdout and stderr)."""
    folder = tmp_path_factory.mktemp("fresh")
    numbers = itertools.count()

    def run(code=None, script=None, args=(), timeout=300):
        number = next(numbers)
        if code is not None:
            script = folder / f"code-{number}.py"
            script.write_text(textwrap.dedent(code))
        log = folder / f"output-{number}.txt"
        child = processes.start_script(script, [str(a) for a in args], dict(os.environ), log)
        child.join(timeout)
        if child.exitcode is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.join()
            raise AssertionError(f"{script} ran past {timeout} s:\n{log.read_text()[-2000:]}")
        return SimpleNamespace(returncode=child.exitcode, output=log.read_text())

    return run



def folder_parameters(path: Path) -> list[str]:
    """The parameters that the notebook's ``check_parameters`` checks with
    ``helpers.params.folder``: work folders it may empty, so refuses unless it made them."""
    cells = course.notebook_json(path)["cells"]
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    module = re.search(r"(\w+)\.check_parameters\(", "".join(cells[tagged + 1]["source"]))[1]
    source = (course.ROOT / "helpers" / f"{module}.py").read_text()
    rules = source[source.index("def check_parameters("):]
    return re.findall(r"(\w+)=\(\1, (?:\w+\.)?folder\(", rules)


# -- the exercises' answer corpus ---------------------------------------------------------------
# Every verdict a test of the exercise checks (tests/test_exercises_nbNN.py, test_tpu_*.py)
# receives is one answer of the corpus: right or wrong, the untouched placeholder and the given
# solutions apart. The records go to a file, as the test workers are processes of their own; the
# counts per exercise are printed at the end of the run. A run of every exercise test (the make
# targets unit, tpu-unit-keras-jax and tpu-unit-pytorch-xla set COURSE_CORPUS to their name)
# writes them to build/exercise-corpus/NAME.json and fails if they are not the ones committed in
# docs/exercise_corpus.json (`python -m tools.exercises --corpus` copies each NAME.json there, and
# writes docs/instructor_notes.md's table from it).

#: the modules that test exercise checks (09's, 10's and 11's test their plumbing beside them)
EXERCISE_TESTS = ("test_exercises_nb", "test_tpu_keras_jax", "test_tpu_pytorch_xla",
                  "test_tpu_scale")
CORPUS_DIR = course.BUILD / "exercise-corpus"
CORPUS = {"file": CORPUS_DIR / f"{os.getpid()}.jsonl"}  # one per run: its controller's pid
COMMITTED = course.ROOT / "docs" / "exercise_corpus.json"


def _corpus_record(exercise, passed, message, solution=False):
    kind = ("untouched" if message == exercises.UNTOUCHED else "solution" if solution
            else "right" if passed else "wrong")
    CORPUS["file"].parent.mkdir(parents=True, exist_ok=True)
    with CORPUS["file"].open("a", encoding="utf-8") as out:
        out.write(json.dumps({"exercise": exercise, "kind": kind}) + "\n")


@pytest.fixture
def record():
    """``record(exercise, passed, message, solution=False)``: an answer judged elsewhere (in a
    child process) joins the corpus."""
    return _corpus_record


@pytest.fixture(autouse=True)
def _corpus(request, monkeypatch):
    """In the tests of the exercise checks, every verdict shown is recorded."""
    if not request.module.__name__.startswith(EXERCISE_TESTS):
        yield
        return
    shown = exercises._show
    name = request.node.name  # a test of the given solution, not of another answer
    solution = ("solution" in name or "need_no" in name
                or re.fullmatch(r"test_\d\d_\d_right", request.node.originalname))

    def show(verdict):
        _corpus_record(verdict.exercise, verdict.passed, verdict.message, solution)
        shown(verdict)

    monkeypatch.setattr(exercises, "_show", show)
    yield


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # a test worker (pytest-xdist): its controller's file
        CORPUS["file"] = CORPUS_DIR / f"{os.getppid()}.jsonl"
    else:
        CORPUS["file"].unlink(missing_ok=True)


def corpus_counts(records: str) -> dict[str, dict[str, int]]:
    """``{exercise: {"right": n, "wrong": m}}`` from the records (JSON lines), sorted."""
    counts = {}
    for line in records.splitlines():
        entry = json.loads(line)
        count = counts.setdefault(entry["exercise"], {"right": 0, "wrong": 0})
        if entry["kind"] in count:
            count[entry["kind"]] += 1
    return dict(sorted(counts.items()))


def corpus_differences(counts, committed) -> list[str]:
    """What differs between ``counts`` and ``committed`` (the same form), exercise by exercise."""
    def said(count):
        return f"{count['right']}/{count['wrong']}" if count else "none"

    return [f"{ex} {said(counts.get(ex))} (committed {said(committed.get(ex))})"
            for ex in sorted(set(counts) | set(committed)) if counts.get(ex) != committed.get(ex)]


def pytest_sessionfinish(session, exitstatus):
    """In a run named by COURSE_CORPUS: the counts to build/exercise-corpus/NAME.json, and a
    failure if they differ from the committed ones."""
    run = os.environ.get("COURSE_CORPUS")
    if hasattr(session.config, "workerinput") or not CORPUS["file"].exists():
        return
    CORPUS["counts"] = counts = corpus_counts(CORPUS["file"].read_text(encoding="utf-8"))
    CORPUS["file"].unlink()
    if not run:
        return
    (CORPUS_DIR / f"{run}.json").unlink(missing_ok=True)  # never a failed run's counts
    if exitstatus != 0:
        return
    (CORPUS_DIR / f"{run}.json").write_text(json.dumps(counts, indent=1) + "\n")
    committed = json.loads(COMMITTED.read_text()).get(run, {}) if COMMITTED.exists() else {}
    if differences := corpus_differences(counts, committed):
        CORPUS["stale"] = (f"exercise answer corpus: {'; '.join(differences)}: the tests changed; "
                           f"run `python -m tools.exercises --corpus` and commit "
                           f"docs/exercise_corpus.json and docs/instructor_notes.md")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if "counts" not in CORPUS:
        return
    terminalreporter.write_line("exercise answer corpus (right / wrong answers, beyond the "
                                "solution and the placeholder):")
    terminalreporter.write_line("  " + "; ".join(
        f"{ex} {c['right']}/{c['wrong']}" for ex, c in CORPUS["counts"].items()))
    if "stale" in CORPUS:
        terminalreporter.write_line(CORPUS["stale"], red=True, bold=True)
