"""helpers.exercises (the checks' plumbing) and tools/exercises.py (the exercises' form, the
solved copies). Each notebook's own checks are tested in tests/test_exercises_nbNN.py; make test
runs every notebook with its exercises untouched (each check must say "not yet") and solved
(each must say "right")."""

import json

import nbformat
import pytest
from solved import solution_functions

from helpers import exercises
from helpers.exercises import EXERCISE_MIME, Verdict, check
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


def test_a_right_answer_passes_and_says_what_it_proves(registered, capsys):
    verdict = check(registered, 42)
    assert verdict.passed and verdict.message == "Yes."
    assert capsys.readouterr().out.strip() == verdict.line()
    assert verdict.line().startswith("✅ Exercise 99.1 (answer the question): right.")


@pytest.fixture
def registered_function():
    """A check of a function ``answer()`` that must return 42, as most exercises are."""
    exercises.load_checks()

    @exercises.exercise("99.2", "write the function", hint="return 6 * 7", right="Yes.")
    def answer(function):
        value = function()
        exercises.require(value)
        return None if value == 42 else f"{value} is not the answer."

    yield "99.2"
    del exercises.REGISTRY["99.2"]


def _untouched():
    """What the exercise cell holds before the learner writes anything."""
    ...


def test_an_untouched_exercise_says_not_yet_and_nothing_more(registered, registered_function):
    """"Run all" on an untouched notebook shows no hint (some hints come close to the answer)."""
    for verdict in (check(registered, ...), check(registered_function, _untouched)):
        assert not verdict.passed and verdict.message == exercises.UNTOUCHED
        assert "Hint" not in verdict.line() and verdict.hint == ""


def test_an_attempt_that_forgets_return_is_told_so_with_the_hint(registered_function):
    def attempt():
        answer = 6 * 7  # noqa: F841  (the learner's line, and no return)

    verdict = check(registered_function, attempt)
    assert verdict.message == exercises.NO_RETURN and "`return` missing" in verdict.message
    assert verdict.line().endswith("Hint: return 6 * 7")


def test_a_wrong_attempt_gets_the_hint(registered_function):
    verdict = check(registered_function, lambda: 41)
    assert verdict.message == "41 is not the answer." and verdict.line().endswith(
        "Hint: return 6 * 7")


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
    right = Verdict("02.1", "t", True, "ok", "h")._repr_mimebundle_()
    wrong = Verdict("02.2", "t", False, "no", "h")._repr_mimebundle_()
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


def test_a_check_cell_shows_its_verdict_once_in_a_kernel():
    """check() shows the verdict and returns it; as the cell's last value, IPython must not
    show it a second time."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nfrom helpers import exercises\n"
        'exercises.check("01.2", lambda: {**os.environ, "CUDA_VISIBLE_DEVICES": ""})'
    )])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [o for o in nb.cells[0].outputs if EXERCISE_MIME in o.get("data", {})]
    assert len(shown) == 1, nb.cells[0].outputs
    assert shown[0]["data"][EXERCISE_MIME] == {"exercise": "01.2", "passed": True}


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
