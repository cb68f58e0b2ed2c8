"""tools.shown: a notebook's code cells must show its lesson's calls, for real."""

import tomllib

import pytest

from tools import shown

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def nb(*sources):
    return {"cells": [{"cell_type": "code", "source": s} for s in sources]
            + [{"cell_type": "markdown", "source": "tf.GradientTape( in prose does not count"}]}


def test_calls_in_code_count():
    assert shown.missing(nb("with tf.GradientTape() as tape:\n    pass"),
                         {"code": ["tf.GradientTape("]}) == []


def test_comments_strings_and_prose_do_not_count():
    notebook = nb("# tf.GradientTape() would go here", "x = 'tf.GradientTape('",
                  'y = f"{1} tf.GradientTape("')
    assert shown.missing(notebook, {"code": ["tf.GradientTape("]}) == ["code: tf.GradientTape("]


def test_whitespace_is_ignored_and_alternatives_accepted():
    notebook = nb("ds = ds.map(f, num_parallel_calls = tf.data.AUTOTUNE)")
    wanted = {"code": ["num_parallel_calls=tf.data.AUTOTUNE", "x.device | .map("]}
    assert shown.missing(notebook, wanted) == []


def test_text_entries_may_sit_in_strings_and_shell_lines():
    notebook = nb("!nvidia-smi --query-gpu=name --format=csv", "os.environ['TF_CONFIG'] = '{}'")
    assert shown.missing(notebook, {"text": ["nvidia-smi", "TF_CONFIG"]}) == []
    assert shown.missing(notebook, {"code": ["TF_CONFIG"]}) == ["code: TF_CONFIG"]


def test_every_notebook_has_a_list():
    with open(shown.SHOWN_FILE, "rb") as f:
        lists = tomllib.load(f)
    assert {p.stem for p in shown.notebook_paths()} <= set(lists)
