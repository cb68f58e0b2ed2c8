"""Notebook 05's exercise checks: each says "right" to its solution (the block in
solutions/05_data_parallel.py) and "not yet", with the expected reason, to the untouched
exercise and to the usual mistakes. Like the notebook's exercises, they need only numpy."""

import sys

import numpy as np
import pytest

from helpers.exercises import check
from tools.exercises import solution_functions

UNTOUCHED = "still holds its placeholder"


@pytest.fixture(scope="module")
def solved():
    return solution_functions("05_data_parallel", np=np)


def untouched(*args, **kwargs):
    """An exercise function whose body is still `...`."""


def test_checks_need_no_tensorflow(solved, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # `import tensorflow` now fails
    monkeypatch.setitem(sys.modules, "jax", None)
    for exercise, answer in (("05.1", "replica_loss"), ("05.2", "pipeline_files")):
        verdict = check(exercise, solved[answer])
        assert verdict.passed, verdict.message


# 05.1: the loss averaged over the global batch


def test_replica_loss_solution_is_right(solved):
    verdict = check("05.1", solved["replica_loss"])
    assert verdict.passed, verdict.message


def test_replica_loss_untouched_is_not_done():
    assert UNTOUCHED in check("05.1", untouched).message


def test_replica_loss_catches_the_per_replica_mean():
    verdict = check("05.1", lambda losses, global_batch_size: np.mean(losses))
    assert not verdict.passed
    assert "On 4 replicas" in verdict.message and "each replica's own mean" in verdict.message


def test_replica_loss_catches_a_mean_over_the_replica_count():
    def mean_over_replicas(losses, global_batch_size):  # right only when the shards are equal
        replicas = global_batch_size // len(losses)
        return np.mean(losses) / replicas

    verdict = check("05.1", mean_over_replicas)
    assert not verdict.passed and "short last batch of 10" in verdict.message


# 05.2: the files each input pipeline reads


def test_pipeline_files_solution_is_right(solved):
    verdict = check("05.2", solved["pipeline_files"])
    assert verdict.passed, verdict.message


def test_pipeline_files_untouched_is_not_done():
    assert UNTOUCHED in check("05.2", untouched).message


def test_pipeline_files_catches_dropped_files():
    def blocks(files, num_pipelines, pipeline_id):
        size = len(files) // num_pipelines
        return files[pipeline_id * size:(pipeline_id + 1) * size]

    verdict = check("05.2", blocks)
    assert not verdict.passed and "no pipeline reads" in verdict.message


def test_pipeline_files_catches_an_uneven_split():
    def ceil_blocks(files, num_pipelines, pipeline_id):
        size = -(-len(files) // num_pipelines)
        return files[pipeline_id * size:(pipeline_id + 1) * size]

    verdict = check("05.2", ceil_blocks)
    assert not verdict.passed and "[3, 3, 3, 1]" in verdict.message


def test_pipeline_files_catches_every_pipeline_reading_everything():
    verdict = check("05.2", lambda files, num_pipelines, pipeline_id: files)
    assert not verdict.passed and "more than one pipeline" in verdict.message


def test_pipeline_files_wants_the_shard_order():
    def balanced_blocks(files, num_pipelines, pipeline_id):
        return [list(s) for s in np.array_split(files, num_pipelines)][pipeline_id]

    verdict = check("05.2", balanced_blocks)
    assert not verdict.passed and "not the ones" in verdict.message


def test_05_1_an_unusable_result_is_not_blamed_on_the_checks_line():
    """An answer whose result the check cannot use fails inside the check: the message says what
    went wrong with the result, never a line of helpers/exercises as if it were the learner's."""
    result = check("05.1", lambda *args, **kwargs: "a string")
    assert not result.passed
    assert result.message.startswith("What your code returned could not be used as the task asks")
    assert "line " not in result.message
