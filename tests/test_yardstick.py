"""The course's one yardstick for "the same update" (helpers.yardstick), and the test that reads
its verdicts back from executed notebooks (tests/test_notebooks.py), given right and wrong ones."""

import json

import numpy as np
import pytest
from test_notebooks import check_yardstick

from helpers import yardstick


def test_distance_is_relative_to_the_exact_update_and_flattens_lists():
    exact = [np.ones((2, 2)), np.ones(4)]
    assert yardstick.distance(exact, exact) == 0
    assert yardstick.distance([2 * a for a in exact], exact) == pytest.approx(1.0)
    assert yardstick.distance(np.float32(1 + 1e-3) * np.ones(8), np.ones(8)) == pytest.approx(
        1e-3, rel=1e-3)


@pytest.mark.parametrize("away, own, verdict", [(1e-3, 1e-3, "rounding, the same update"),
                                                (2e-3, 1e-3, "rounding, the same update"),
                                                (2.1e-3, 1e-3, "another update"),
                                                (1e-4, 1e-6, "rounding, the same update"),
                                                (1.3e-4, 1e-6, "another update")])
def test_rounding_ends_at_twice_the_runs_own_and_never_below_a_floor(away, own, verdict):
    assert f": {verdict}" in yardstick.line("8 devices", away, own)


def test_a_verdict_that_rests_on_the_floor_says_so():
    assert yardstick.line("a", 5e-6, 1e-6).endswith(
        "rounding, the same update (by the floor: 5 times the run's own).")
    assert yardstick.line("a", 1.5e-6, 1e-6).endswith("rounding, the same update.")
    assert yardstick.line("a", 2e-4, 1e-6).endswith("another update.")


def executed(tmp_path, *lines):
    cells = [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                "text": line + "\n"}]} for line in lines]
    path = tmp_path / "run.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    return path


def test_the_notebook_check_accepts_the_helpers_verdicts(tmp_path):
    check_yardstick(executed(tmp_path, yardstick.line("a", 3e-4, 2e-4),
                             yardstick.line("b", 3e-3, 2e-4), yardstick.line("c", 5e-6, 1e-6)))


@pytest.mark.parametrize("line", [
    "a: 5.0e-04 from float64; this run's own rounding 2.0e-04, so up to 4.0e-04 is rounding: "
    "rounding, the same update.",  # too far for rounding
    "a: 3.0e-04 from float64; this run's own rounding 2.0e-04, so up to 4.0e-04 is rounding: "
    "another update.",  # within it
    "a: 3.0e-04 from float64; this run's own rounding 2.0e-04, so up to 4.0e-03 is rounding: "
    "rounding, the same update.",  # an allowance that is not the yardstick's
    "a: 5.0e-06 from float64; this run's own rounding 1.0e-06, so up to 2.0e-06 is rounding: "
    "another update.",  # the floor forgotten
    "a: 5.0e-06 from float64; this run's own rounding 1.0e-06, so up to 1.19e-04 is rounding: "
    "rounding, the same update.",  # rounding by the floor, not said
])
def test_the_notebook_check_refuses_a_wrong_verdict(tmp_path, line):
    with pytest.raises(AssertionError):
        check_yardstick(executed(tmp_path, line))


def test_the_notebook_check_wants_a_line(tmp_path):
    with pytest.raises(AssertionError, match="no yardstick line"):
        check_yardstick(executed(tmp_path, "the updates agree"))
