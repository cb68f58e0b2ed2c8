"""The notebook-execution suite: every notebook runs headlessly with small parameters,
and every invalid parameter value stops it in its validation cell with one clear line.

Invalid values: the first of each notebook runs through papermill end to end; all of them run
through the validation cell in one kernel per notebook (a kernel start costs seconds).
The executed copies land in build/test/executed, where the nbval stage re-runs them
($COURSE_TEST_BUILD, relative to the repository, moves them: the compat stack uses it).
"""

import json
import os

import pytest

from tools import course, run_notebooks

pytestmark = pytest.mark.notebooks

BUILD = course.ROOT / os.environ.get("COURSE_TEST_BUILD", "build/test")
NOTEBOOKS = course.notebook_paths()
PROFILES = course.profiles()
INVALID = {
    path: [
        (name, value)
        for name, values in PROFILES.get("invalid", {}).get(path.stem, {}).items()
        for value in values
    ]
    for path in NOTEBOOKS
}
FIRST_INVALID = [(path, *cases[0]) for path, cases in INVALID.items() if cases]


def validation_cell_id(path) -> str:
    """The id of the cell after the ``parameters`` cell, in the stored notebook."""
    cells = json.loads(path.read_text())["cells"]
    tagged = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    return cells[tagged[0] + 1]["id"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_with_test_parameters(path):
    result = run_notebooks.execute(path, BUILD, course.parameters_for(path.stem, "test"))
    assert result.status == "passed", f"cell {result.error_cell}: {result.error}"
    assert result.device != "not stated", "the notebook must say which device ran it"
    if path.stem == "04_dcgan":  # which batch norm and dropout ran (helpers.layers.describe)
        assert "Our step's batch norm: " in result.executed.read_text()


@pytest.mark.parametrize(
    "path, name, value", FIRST_INVALID, ids=[f"{p.stem}-{n}={v!r}" for p, n, v in FIRST_INVALID]
)
def test_invalid_parameter_fails_in_the_validation_cell_with_one_line(path, name, value, tmp_path):
    params = {**course.parameters_for(path.stem, "test"), name: value}
    result = run_notebooks.execute(path, tmp_path, params)
    assert result.status == "failed"
    assert result.error_cell == validation_cell_id(path), result.error
    assert result.error.startswith(f"ParameterError: Invalid parameter {name}={value!r}")
    assert "\n" not in result.error
    nb = json.loads(result.executed.read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == result.error_cell)
    error = next(o for o in cell["outputs"] if o["output_type"] == "error")
    assert error["traceback"] == [result.error], "shown as one line, not a traceback"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_invalid_value_is_refused_by_the_validation_cell(path, tmp_path):
    cases = [(None, None), *INVALID[path]]  # the control: the test parameters pass
    results = run_notebooks.validate_in_one_kernel(
        path, cases, course.parameters_for(path.stem, "test"), tmp_path
    )
    assert results[0].error == "", f"the test parameters must pass: {results[0].error}"
    wrong = [
        f"{r.name}={r.value!r}: {r.error or 'accepted'}"
        for r in results[1:]
        if not r.error.startswith(f"ParameterError: Invalid parameter {r.name}={r.value!r}")
        or "\n" in r.error
        or r.traceback != [r.error]
    ]
    assert not wrong, "not refused with one line: " + "; ".join(wrong)
