"""helpers.exercises (the checks' plumbing) and tools/exercises.py (the exercises' form, the
solved copies). Each notebook's own checks are tested in tests/test_exercises_nbNN.py; make test
runs every notebook with its exercises untouched (each check must say "not yet") and solved
(each must say "right")."""

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import conftest
import nbformat
import numpy as np
import pytest
from solved import solution_functions
from test_exercises_nb01 import trusting
from test_exercises_nb02 import imported_from_the_public_module as imported_inside
from test_exercises_nb03 import loader
from test_exercises_nb05 import _resume, _settings
from test_exercises_nb06 import GLOBAL_LOSS, INPUT_FN
from test_exercises_nb07 import accumulating, doubling_only
from test_exercises_nb08 import worker_zero_always

from helpers import exercises, scale_out_profile
from helpers.devices import mirrored
from helpers.exercises import EXERCISE_MIME, Verdict, check
from helpers.exercises.nb08 import _stop_profiler
from tools import exercises as tool
from tools.run_notebooks import verdicts_in


@pytest.fixture
def registered():
    """A check registered for the test only, on a value that must be 42."""
    exercises.load_checks()

    @exercises.exercise("99.1", "answer the question", hint="six times seven", right="Yes.")
    def answer(value):
        exercises.require(value)
        return None if value == 42 else f"{value} is not the answer."

    yield "99.1"
    del exercises.REGISTRY["99.1"]
    exercises.TRIES.pop("99.1", None)


def test_a_right_answer_passes_and_says_what_it_proves(registered, capsys):
    verdict = check(registered, 42)
    assert verdict.passed and verdict.message == "Yes."
    assert capsys.readouterr().out.strip() == verdict.line()
    assert verdict.line().startswith("✅ Exercise 99.1 (answer the question): right.")


@pytest.fixture
def registered_function():
    """A check of a function ``answer()`` that must return 42, as most exercises are."""
    exercises.load_checks()

    @exercises.exercise("99.2", "write the function", hint="return 6 * 7", right="Yes.",
                        where="the cell under \"Multiplying\"")
    def answer(function):
        value = function()
        exercises.require(value)
        return None if value == 42 else f"{value} is not the answer."

    yield "99.2"
    del exercises.REGISTRY["99.2"]
    exercises.TRIES.pop("99.2", None)


WHERE = ("Where to look: the cell under \"Multiplying\". A changed answer that is still wrong "
         "gets a hint.")


def _untouched():
    """What the exercise cell holds before the learner writes anything."""
    ...


def test_an_untouched_exercise_says_not_yet_and_nothing_more(registered, registered_function):
    """"Run all" on an untouched notebook shows no hint (some hints come close to the answer),
    however often it runs, and it is not a try: the first real one still gets where to look."""
    for _ in range(3):
        for verdict in (check(registered, ...), check(registered_function, _untouched)):
            assert not verdict.passed and verdict.message == exercises.UNTOUCHED
            assert verdict.line().endswith(exercises.UNTOUCHED) and verdict.hint == ""
    assert check(registered_function, lambda: 41).hint == WHERE


def test_an_attempt_that_forgets_return_is_told_so_and_where_to_look(registered_function):
    def attempt():
        answer = 6 * 7  # noqa: F841  (the learner's line, and no return)

    verdict = check(registered_function, attempt)
    assert verdict.message == exercises.NO_RETURN and "`return` missing" in verdict.message
    assert verdict.line().endswith(f"`return` missing? {WHERE}")


def _cell(source: str):
    """The answer a cell defines, as a run of the cell makes it: a new function each run."""
    names = {}
    exec(source, names)
    return names["answer"]


def test_hints_escalate_with_each_changed_wrong_answer_and_only_then(registered_function):
    """A first wrong try: where to look; the same answer again (its cell run again, a comment
    added): the same verdict; another wrong answer: the hint, and the hint from then on."""
    first = check(registered_function, _cell("def answer():\n    return 41\n"))
    assert first.line() == f"❌ Exercise 99.2 (write the function): not yet. 41 is not the " \
                           f"answer. {WHERE}"
    for again in ("def answer():\n    return 41\n", "def answer():\n\n    return 41  # hm\n"):
        assert check(registered_function, _cell(again)) == first
    second = check(registered_function, _cell("def answer():\n    return 40\n"))
    assert second.line().endswith("40 is not the answer. Hint: return 6 * 7")
    assert check(registered_function, _cell("def answer():\n    return 41\n")) == second.__class__(
        "99.2", "write the function", False, "41 is not the answer.", "Hint: return 6 * 7")
    right = check(registered_function, _cell("def answer():\n    return 6 * 7\n"))
    assert right.passed and right.hint == "" and right.line().endswith("right. Yes.")


def test_a_value_answer_escalates_when_the_value_changes(registered):
    """As ``gpu_count = ...`` is checked: the value is the answer; without a ``where`` of its
    own, the exercise points to the section its task names."""
    assert check(registered, 41).hint == check(registered, 41).hint == (
        f"Where to look: {exercises.Exercise.where}. A changed answer that is still wrong gets "
        "a hint.")
    assert check(registered, 43).hint == "Hint: six times seven"


def test_an_answers_fingerprint_is_its_code_and_values_not_its_layout():
    fingerprint = exercises.fingerprint
    assert fingerprint(_cell("def answer(x=1):\n    return x\n")) == fingerprint(
        _cell("def answer(x=1):\n    # the same\n\n    return x\n"))
    for other in ("def answer(x=2):\n    return x\n", "def answer(x=1):\n    return -x\n",
                  "def answer(x=1):\n    return abs(x)\n",
                  "def answer(x=1):\n    return lambda: x + 1\n"):
        assert fingerprint(_cell(other)) != fingerprint(_cell("def answer(x=1):\n    return x\n"))
    assert fingerprint(({"b", "a"}, [1.5], object())) == fingerprint(({"a", "b"}, [1.5], object()))


def test_a_wrong_answer_says_what_is_wrong(registered):
    verdict = check(registered, 41)
    assert not verdict.passed and verdict.message == "41 is not the answer."


def test_code_that_raises_is_reported_in_one_line_with_the_learners_line(registered):
    def learners():
        return {}["missing"]  # the learner's bug

    exercises.REGISTRY["99.1"] = exercises.REGISTRY["99.1"].__class__(
        "99.1", "answer the question", "six times seven", lambda fn: fn(), "Yes."
    )
    verdict = check("99.1", learners)
    assert not verdict.passed
    assert verdict.message.startswith("Your code raised KeyError: 'missing'")
    assert "the learner's bug" in verdict.message and "\n" not in verdict.message


def test_an_unknown_exercise_is_a_clear_error():
    with pytest.raises(KeyError, match="no exercise '00.9'"):
        check("00.9", 1)


def test_a_check_registered_twice_is_refused(registered):
    with pytest.raises(ValueError, match="registered twice"):
        exercises.exercise("99.1", "again", hint="", right="")(lambda: None)


def test_the_verdict_leaves_a_record_the_tests_read():
    right = Verdict("02.1", "t", True, "ok", "")._repr_mimebundle_()
    wrong = Verdict("02.2", "t", False, "no", "Hint: h")._repr_mimebundle_()
    assert right[EXERCISE_MIME] == {"exercise": "02.1", "passed": True}
    assert "color:#b3261e" in wrong["text/html"] and "Hint: h" in wrong["text/plain"]
    again = Verdict("02.1", "t", False, "no", "h")._repr_mimebundle_()  # a second run's verdict
    nb = {"cells": [{"outputs": [{"data": right}, {"data": wrong}]},
                    {"outputs": [{"data": again}]}, {"cell_type": "markdown"}]}
    assert verdicts_in(nb) == {"02.1": False, "02.2": False}


def _course(tmp_path, monkeypatch, cells, solution):
    """A one-notebook course in tmp_path: notebook 99 with ``cells``, its solutions file."""
    nb = nbformat.v4.new_notebook()
    for kind, source in cells:
        new = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        nb.cells.append(new(source))
    path = tmp_path / "99_demo.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "99_demo.py").write_text(solution)
    monkeypatch.setattr(tool, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(tool, "PER_NOTEBOOK", (1, 4))
    return path


GOOD = [("md", "## Exercises"), ("code", "# Exercise 99.1: answer the question\nvalue = ..."),
        ("code", 'exercises.check("99.1", value)'), ("code", "print('after')")]
SOLVED = '"""Solutions."""\n\n# Exercise 99.1: answer the question\nvalue = 42\n\n\n'


def test_a_well_formed_exercise_has_no_problems_and_is_solved_in_place(
    registered, tmp_path, monkeypatch
):
    path = _course(tmp_path, monkeypatch, GOOD, SOLVED)
    assert tool.problems([path]) == []
    solved = tool.solution_notebook(path)
    assert solved.cells[1].source == "# Exercise 99.1: answer the question\nvalue = 42"
    original = nbformat.read(path, as_version=4)
    assert [c.source for i, c in enumerate(solved.cells) if i != 1] == [
        c.source for i, c in enumerate(original.cells) if i != 1
    ], "only the exercise cell changes"
    written = tool.write_solutions(tmp_path / "out", [path])
    assert "".join(json.loads(written[0].read_text())["cells"][1]["source"]).endswith("= 42")


@pytest.mark.parametrize(
    "cells, solution, problem",
    [
        (GOOD[:2] + GOOD[3:], SOLVED, "is not followed by its check cell"),
        (GOOD[1:], SOLVED, "no '## Exercises' heading"),
        (GOOD, SOLVED.replace("answer the question", "another title"), "in its solution"),
        (GOOD, '"""Solutions."""\n', "exercise 99.1 has no solution"),
        (GOOD, SOLVED.replace("value = 42", "value = ..."), "solution is the exercise itself"),
        (GOOD, SOLVED + "# Exercise 99.2: more\nx = 1\n", "solution 99.2 has no exercise cell"),
        ([GOOD[0], ("code", "# Exercise 99.1: answer the question\nvalue = 0"), *GOOD[2:]],
         SOLVED, "no placeholder"),
        ([GOOD[0], ("code", "# Exercise 99.1: other words\nvalue = ..."), *GOOD[2:]],
         SOLVED, "in helpers/exercises"),
        (GOOD, SOLVED.replace("42", "memory.estimate_mb(7)"),
         "solution 99.1 uses memory, which no cell before exercise 99.1 defines"),
        ([("code", "print(later)"), *GOOD, ("code", "later = 1")], SOLVED.replace("42", "later"),
         "solution 99.1 uses later"),
    ],
)
def test_a_malformed_exercise_is_reported(registered, tmp_path, monkeypatch, cells, solution,
                                          problem):
    path = _course(tmp_path, monkeypatch, cells, solution)
    found = tool.problems([path])
    assert any(problem in line for line in found), found


def test_a_solution_may_read_what_earlier_cells_and_it_define(registered, tmp_path, monkeypatch):
    earlier = ("code", "%matplotlib inline\nfrom helpers import out_of_memory as oom\n"
                       "for step in range(2):\n    budget = step")
    solution = SOLVED.replace("value = 42", "def f(k):\n    return k + budget\n\n"
                                            "value = [f(i) for i in range(3)] + [oom, len]")
    path = _course(tmp_path, monkeypatch, [earlier, ("code", "%%writefile x.py\nnot python"),
                                           *GOOD], solution)
    assert tool.problems([path]) == []


def test_numbering_and_count_are_checked(registered, tmp_path, monkeypatch):
    cells = [GOOD[0], ("code", "# Exercise 99.2: answer the question\nvalue = ..."),
             ("code", 'exercises.check("99.2", value)')]
    path = _course(tmp_path, monkeypatch, cells, SOLVED.replace("99.1", "99.2"))
    monkeypatch.setattr(tool, "PER_NOTEBOOK", (2, 4))
    found = tool.problems([path])
    assert any("1 exercises, expected 2 to 4" in line for line in found)
    assert any("expected 99.1, 99.2" in line for line in found)


def test_a_check_cell_shows_its_verdict_once_and_run_all_twice_shows_the_same():
    """check() shows the verdict and returns it; as the cell's last value, IPython must not
    show it a second time. "Run all" twice in one kernel: the same wrong answer's cell run again
    shows what it showed; a changed one escalates."""
    from nbclient import NotebookClient

    code = nbformat.v4.new_code_cell
    answer = ('def answer():\n    return {}\n\n\nexercises.check("99.3", answer)')
    nb = nbformat.v4.new_notebook(cells=[
        code("import os\nfrom helpers import exercises\n"
             'exercises.check("01.2", lambda: {**os.environ, "CUDA_VISIBLE_DEVICES": ""})'),
        code('@exercises.exercise("99.3", "t", hint="six times seven", right="Yes.")\n'
             'def _(answer):\n    return None if answer() == 42 else "Not 42."'),
        *(code(answer.format(value)) for value in (41, 41, 40, 42))])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [[o["data"] for o in cell.outputs if EXERCISE_MIME in o.get("data", {})]
             for cell in nb.cells]
    assert [len(s) for s in shown] == [1, 0, 1, 1, 1, 1], nb.cells
    assert shown[0][0][EXERCISE_MIME] == {"exercise": "01.2", "passed": True}
    lines = [s[0]["text/plain"].split("not yet. ")[-1] for s in shown[2:]]
    assert lines[0] == lines[1] == (f"Not 42. Where to look: {exercises.Exercise.where}. A "
                                    "changed answer that is still wrong gets a hint.")
    assert lines[2] == "Not 42. Hint: six times seven" and lines[3].endswith("right. Yes.")


def test_a_named_test_run_records_its_counts_and_fails_when_they_are_not_committed(
    tmp_path, monkeypatch
):
    """tests/conftest.py: `make unit` (COURSE_CORPUS=unit) writes the counts of right and wrong
    answers per exercise (the solution and the placeholder apart), and fails with one line
    naming the command to run when docs/exercise_corpus.json holds others."""
    records, committed = tmp_path / "records.jsonl", tmp_path / "committed.json"
    monkeypatch.setitem(conftest.CORPUS, "file", records)
    for key in ("counts", "stale"):  # as they were after the test: this run's own, if any
        monkeypatch.setitem(conftest.CORPUS, key, None)
        monkeypatch.delitem(conftest.CORPUS, key)
    monkeypatch.setattr(conftest, "CORPUS_DIR", tmp_path)
    monkeypatch.setattr(conftest, "COMMITTED", committed)
    monkeypatch.setenv("COURSE_CORPUS", "unit")
    kinds = [("01.1", "right"), ("01.1", "wrong"), ("01.1", "solution"), ("01.2", "untouched"),
             ("01.1", "wrong")]
    counts = {"01.1": {"right": 1, "wrong": 2}, "01.2": {"right": 0, "wrong": 0}}

    def finish(runs, status=0):
        records.write_text("".join(json.dumps({"exercise": e, "kind": k}) + "\n"
                                   for e, k in kinds))
        committed.write_text(json.dumps(runs))
        session = SimpleNamespace(config=SimpleNamespace(), exitstatus=status)
        conftest.pytest_sessionfinish(session, status)
        return session.exitstatus

    assert finish({"unit": counts}) == 0 and "stale" not in conftest.CORPUS
    assert json.loads((tmp_path / "unit.json").read_text()) == counts == conftest.CORPUS["counts"]
    assert finish({"unit": {"01.1": {"right": 1, "wrong": 1}}, "other": counts}) == 1
    assert conftest.CORPUS["stale"].startswith(
        "exercise answer corpus: 01.1 1/2 (committed 1/1); 01.2 0/0 (committed none): ")
    assert "run `python -m tools.exercises --corpus`" in conftest.CORPUS["stale"]
    assert finish({}, status=1) == 1 and not (tmp_path / "unit.json").exists()


def test_the_notes_table_counts_the_answers_the_tests_recorded(
    registered, tmp_path, monkeypatch, capsys
):
    """`python -m tools.exercises --corpus` copies the last test runs' counts to the committed
    file and writes the notes' table from it; `--check` (make check-notebooks) fails when the
    table is not that file's, or an exercise has no counts, and runs no test."""
    path = _course(tmp_path, monkeypatch, GOOD, SOLVED)
    notes, corpus, runs = tmp_path / "notes.md", tmp_path / "corpus.json", tmp_path / "runs"
    notes.write_text("Counts:\n\n<!-- exercises:start -->\nby hand\n<!-- exercises:end -->\n")
    corpus.write_text(json.dumps({"unit": {"01.1": {"right": 3, "wrong": 4}}}))
    for name, value in [("NOTES", notes), ("CORPUS", corpus), ("BUILD", runs),
                        ("notebook_paths", lambda: [path]),
                        ("load_checks", lambda: {"99.1": exercises.REGISTRY["99.1"]})]:
        monkeypatch.setattr(tool, name, value)
    assert tool.main(["--check"]) == 1 and capsys.readouterr().err == (
        "exercise 99.1 has no answers counted in corpus.json: run `make unit` and `make "
        "tpu-unit`, then `python -m tools.exercises --corpus`\n")
    (runs / "exercise-corpus").mkdir(parents=True)  # what `make unit` recorded
    (runs / "exercise-corpus" / "unit.json").write_text('{"99.1": {"right": 3, "wrong": 5}}')
    assert tool.main(["--check"]) == 1, "the check reads the committed counts only"
    assert tool.main(["--corpus"]) == 0 and tool.main(["--check"]) == 0
    assert json.loads(corpus.read_text()) == {"unit": {"99.1": {"right": 3, "wrong": 5}}}
    assert notes.read_text().startswith(
        "Counts:\n\n<!-- exercises:start -->\n| notebook | right / wrong answers |\n|---|---|\n"
        "| 99 | 99.1: 3/5 |\n\n**[99_demo]")
    corpus.write_text(json.dumps({"unit": {"99.1": {"right": 3, "wrong": 6}}}))
    capsys.readouterr()
    assert tool.main(["--check"]) == 1 and capsys.readouterr().err == (
        "docs/instructor_notes.md is stale: run `python -m tools.exercises --notes`\n")
    corpus.write_text(json.dumps({"unit": {"99.1": {"right": 2, "wrong": 6}}}))
    assert tool.main(["--check"]) == 1 and "exercise 99.1: 2 right and 6 wrong answers in its " \
        "tests; at least 3 and 4" in capsys.readouterr().err, "too few answers: a thin corpus"


def test_solution_functions_defines_the_functions_and_leaves_the_notebooks_code_out(
    tmp_path, monkeypatch
):
    (tmp_path / "99_demo.py").write_text(
        "# Exercise 99.1: t\nimport math\n\n\ndef root(x):\n    return math.sqrt(x) + offset\n"
        "\n\nprint(root(data))  # the notebook's own data: not run\n"
    )
    monkeypatch.setattr(tool, "SOLUTIONS", tmp_path)
    names = solution_functions("99_demo", offset=1)
    assert names["root"](9) == 4.0 and "data" not in names


# -- a check never breaks the kernel it runs in (issue 50) ---------------------------------------

def _leaves_a_policy(kind):  # wrong: imports inside and leaves the global policy changed
    import keras
    from keras.mixed_precision import set_global_policy

    set_global_policy("mixed_float16" if kind == "gpu" else "mixed_bfloat16")
    return keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                             keras.layers.Dense(10, dtype="float32")])


def _policy_imported_inside(kind):  # right
    import keras
    from keras import mixed_precision as mp

    previous = mp.global_policy()
    mp.set_global_policy("mixed_float16" if kind == "gpu" else "mixed_bfloat16")
    try:
        return keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                 keras.layers.Dense(10, dtype="float32")])
    finally:
        mp.set_global_policy(previous)


def _epoch_via_numpy(x, y, batch_size):  # wrong: NumPy imported inside, a copy to the host
    import tensorflow as tf
    from numpy import asarray, random  # noqa: PLC0415

    order, xs, ys = random.permutation(len(y)), asarray(x), asarray(y)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield tf.constant(xs[index]), tf.constant(ys[index])


def _epoch_host_indices(x, y, batch_size):  # right: indices from the host, the data stays put
    import tensorflow as tf
    from numpy import random  # noqa: PLC0415

    order = random.permutation(int(tf.shape(x)[0]))
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.gather(y, index)


def _read_each_step(step, batches, read_back=20):  # wrong: reads every step, `asarray` imported
    from numpy import asarray  # noqa: PLC0415

    return [float(asarray(step(batch))) for batch in batches]


def _read_back_imported(step, batches, read_back=20):  # right
    from numpy import asarray  # noqa: PLC0415

    losses, pending = [], []
    for batch in batches:
        pending.append(step(batch))
        if len(pending) == read_back:
            losses += asarray(pending, dtype="float32").tolist()
            pending = []
    return losses + [float(loss) for loss in pending]


def _soft_placement_left_off(device, fn):  # right: TensorFlow refuses; the setting left off
    import tensorflow as tf

    tf.config.set_soft_device_placement(False)
    with tf.device(device):
        return fn()


def _environ_changed(tf_config, shared, scratch):  # wrong: TF_CONFIG left set in the kernel
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    return shared


def _profiler_left_running(logdir, steps=5, batch_size=64):  # wrong: never stopped
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    return None, None


def _kernel_answers(folder):
    """Per exercise of notebooks 01 to 08: a wrong answer, one of the kind that once broke (or
    could break) the kernel where there is one, and the given solution, each as
    ``(answer's arguments, named arguments, right)``. 08.2's wrong answer is of that kind: its
    solution, seconds of profiling, runs once."""
    import keras
    import tensorflow as tf

    from helpers.lessons.nb08 import advice, capture

    (folder / "capture_50.py").write_text("from numpy import asarray as to_host\n")
    sys.path.insert(0, str(folder))

    def read_every_step(step, steps):  # wrong: NumPy's `asarray` imported inside
        from numpy import asarray  # noqa: PLC0415

        return sum(float(asarray(step())) for _ in range(steps)) / steps

    def first_import(step, steps):  # right, and imports a module that keeps NumPy's `asarray`
        __import__("capture_50")
        return float(tf.add_n([step() for _ in range(steps)])) / steps

    def source(table, name):  # one of notebook 06's answers, written as a cell
        space = {"tf": tf}
        exec(next(text for key, text, *_ in table if key == name), space)
        return space[next(k for k in space if not k.startswith("_") and k != "tf")]

    names = dict(tf=tf, keras=keras, np=np, time=time, json=json, Path=Path, os=os,
                 capture=capture, advice=advice, scale_out_profile=scale_out_profile)
    s = {k: v for stem in ("01_runtime_check", "02_gpu_vs_cpu_benchmark", "03_tfdata_pipelines",
                           "04_dcgan", "05_survive_a_disconnect", "06_data_parallel",
                           "07_out_of_memory", "08_scale_out_profile")
         for k, v in solution_functions(stem, **names).items()}
    strategy = mirrored([d.name for d in tf.config.list_logical_devices("CPU")])

    def in_place():  # wrong: this process's environment changed
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return dict(os.environ)

    return {
        "01.1": [((len(tf.config.list_physical_devices("GPU")) + 1,), {}, False),
                 ((len(tf.config.list_physical_devices("GPU")),), {}, True)],
        "01.2": [((lambda: dict(os.environ),), {}, False), ((in_place,), {}, False),
                 ((s["hidden_gpu_env"],), {}, True)],
        "01.3": [((trusting,), {}, False), ((_soft_placement_left_off,), {}, True),
                 ((s["run_on"],), {}, True)],
        "02.1": [((lambda fn, r: fn() and 0.0,), {}, False), ((imported_inside,), {}, True),
                 ((s["median_seconds"],), {}, True)],
        "02.2": [((_leaves_a_policy,), {}, False), ((_policy_imported_inside,), {}, True),
                 ((s["mixed_model"],), {}, True)],
        "02.3": [((read_every_step,), {}, False), ((first_import,), {}, True),
                 ((s["mean_loss"],), {}, True)],
        "03.1": [((s["slow_chain"],), {}, False), ((s["fast_chain"],), {}, True)],
        "03.2": [((loader(tf, ignore="before map"),), {}, False), ((s["load_images"],), {}, True)],
        "03.3": [((_epoch_via_numpy,), {}, False), ((_epoch_host_indices,), {}, True),
                 ((s["device_epoch"],), {}, True)],
        "04.1": [((lambda optimizer: optimizer, s["float16_step"]), {}, False),
                 ((s["float16_optimizer"], s["float16_step"]), {}, True)],
        "04.2": [((_read_each_step,), {}, False), ((_read_back_imported,), {}, True),
                 ((s["run_steps"],), {}, True)],
        "05.1": [((_resume(tf, restore=False),), {}, False), ((s["resume"],), {}, True)],
        "05.2": [((_settings(),), {}, False), ((s["same_settings"],), {}, True)],
        "06.1": [((source(GLOBAL_LOSS, "per-replica-means-summed"), strategy), {}, False),
                 ((s["global_loss"], strategy), {}, True)],
        "06.2": [((source(INPUT_FN, "global-batch"),), {}, False),
                 ((s["array_input_fn"],), {}, True)],
        "07.1": [((doubling_only,), {}, False), ((s["largest_batch"],), {}, True)],
        "07.2": [((accumulating(mean=False),), {}, False), ((s["train_accumulated"],), {}, True)],
        "08.1": [((worker_zero_always,), {}, False), ((_environ_changed,), {}, False),
                 ((s["checkpoint_dir"],), {}, True)],
        "08.2": [((_profiler_left_running,), {"advice": advice}, False),  # wrong, and breaks
                 ((s["profile_gan"],), {"advice": advice}, True)]}


#: every order of three answers (0, 1, 2) as three checks in a row, in 9 checks, not 18 (the
#: solution, last, is checked twice); of two, (0, 1, 0)
ORDERS = (0, 1, 2, 0, 1, 0, 2, 1, 0)


def _kernel_state():
    """What the checks patch or could leave changed, as the process has it now."""
    import keras
    import tensorflow as tf
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    return {"numpy": (np.asarray, np.array), "numpy copied": __import__("capture_50").to_host,
            "sync_devices": tf.test.experimental.sync_devices, "async_wait": context.async_wait,
            "_numpy": ops._EagerTensorBase._numpy, "environment": dict(os.environ),
            "policy": keras.mixed_precision.global_policy().name,
            "soft placement": tf.config.get_soft_device_placement(),
            "profiler running": _stop_profiler()}


def every_order(folder: str) -> dict:
    """In this process (a kernel with its CPU split in 2): each exercise's answers in every
    order; the verdicts, and what the checks left changed."""
    answers = _kernel_answers(Path(folder))
    before, verdicts = _kernel_state(), {}
    for exercise, tries in answers.items():
        verdicts[exercise] = []
        for i in ORDERS if len(tries) == 3 else (0, 1, 0):
            args, named, right = tries[i]
            verdict = check(exercise, *args, **named)
            verdicts[exercise].append([i, verdict.passed == right, verdict.message])
    after = _kernel_state()
    return {"verdicts": verdicts, "changed": sorted(k for k in before if before[k] != after[k])}


EVERY_ORDER = """
import json, sys
sys.path[:0] = [{tests!r}, {root!r}]
from helpers.devices import split_devices
split_devices(2)
import test_exercises
print("RESULTS" + json.dumps(test_exercises.every_order({folder!r})))
"""


def test_every_check_passes_its_solution_after_any_attempts_in_one_kernel(fresh_process,
                                                                          tmp_path):
    """Issue 50: per exercise of notebooks 01 to 08, a wrong answer, one of the kind that once
    broke the kernel (where there is one), and the solution, in every order in one process
    (a new one, its CPU split as notebook 06 splits it): each gets its verdict every time, the
    solution "right"; what the checks patch, and what the answers change, is back afterwards,
    also in a module first imported during a check."""
    tests = Path(__file__).parent
    done = fresh_process(EVERY_ORDER.format(tests=str(tests), root=str(tests.parent),
                                            folder=str(tmp_path)))
    assert done.returncode == 0, done.output[-3000:]
    results = json.loads(done.output.split("RESULTS", 1)[1].splitlines()[0])
    assert set(results["verdicts"]) == {ex for ex in exercises.load_checks() if ex < "09"}
    for exercise, verdicts in results["verdicts"].items():
        assert all(ok for _, ok, _ in verdicts), (exercise, verdicts)
    assert results["changed"] == []


def test_a_kernel_changed_by_an_earlier_cell_is_said_and_put_back(tf, capsys, monkeypatch):
    """02.1 finds tf.test.experimental.sync_devices replaced (a cell, or a check of an older
    release): one line says so, the solution is still judged right, and the original is back."""
    real = tf.test.experimental.sync_devices
    monkeypatch.setattr(tf.test.experimental, "sync_devices", lambda: None)
    solved = solution_functions("02_gpu_vs_cpu_benchmark", tf=tf, np=np, time=time)
    verdict = check("02.1", solved["median_seconds"])
    assert verdict.passed, verdict.message
    assert tf.test.experimental.sync_devices is real
    said = capsys.readouterr().out.splitlines()
    assert said[0] == ("tf.test.experimental.sync_devices had been replaced in this kernel (by a "
                       "cell or an earlier attempt): the check put TensorFlow's own back.")
    assert len(said) == 2 and said[1].startswith("✅ Exercise 02.1")
