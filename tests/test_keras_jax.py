"""Keras on JAX in its own process: the launcher, and notebook 05's own JAX functions
(read out of the notebook, so the test runs the code a learner reads) on 8 simulated devices."""

import os

import pytest

from helpers import distribute
from helpers.errors import JaxProcessError
from helpers.jaxproc import JaxProcess, function_source, functions_in_notebook
from tools.course import NOTEBOOKS

NOTEBOOK = NOTEBOOKS / "05_tpu_distribute.ipynb"


def test_functions_run_in_the_child_share_a_namespace_and_print_here(capsys):
    process = JaxProcess(key="test-namespace")

    @process
    def where(x):
        import os

        os.environ["ONLY_IN_CHILD"] = "1"
        print("from the child")
        return os.getpid(), twice(x)

    @process
    def twice(x):
        return 2 * x

    try:
        pid, value = where(21)
        assert value == 42 and pid != os.getpid()
        assert capsys.readouterr().out == "from the child\n"
        assert "ONLY_IN_CHILD" not in os.environ
    finally:
        process.close()


def test_a_failure_in_the_child_is_raised_here_with_its_traceback():
    process = JaxProcess(key="test-failure")
    broken = process.define("broken", "def broken():\n    return 1 / 0\n")
    try:
        with pytest.raises(JaxProcessError, match="ZeroDivisionError"):
            broken()
        # the process survives a failing function
        assert process.define("fine", "def fine():\n    return 'ok'\n")() == "ok"
    finally:
        process.close()


def test_a_new_process_ends_the_previous_one():
    first = JaxProcess(key="test-replace")
    first.define("one", "def one():\n    return 1\n")()
    assert first.running
    second = JaxProcess(key="test-replace")
    assert not first.running
    second.close()


def test_function_source_drops_the_decorator():
    text = "@in_jax_process\ndef f(a):\n    return a\n\nx = 1\n"
    assert function_source(text) == {"f": "def f(a):\n    return a\n"}


def test_the_notebook_defines_the_jax_lesson_in_its_cells():
    names = functions_in_notebook(NOTEBOOK)
    for name in ("start_keras_on_jax", "data_parallel", "fit_on_jax", "one_fit_step_on_jax",
                 "gan_losses", "gan_step", "build_gan", "train_gan_on_jax"):
        assert name in names, name
    start = names["start_keras_on_jax"]
    assert start.index('os.environ["KERAS_BACKEND"] = "jax"') < start.index("import keras")
    assert start.index("--xla_force_host_platform_device_count") < start.index("import jax")
    assert "keras.distribution.DataParallel" in names["data_parallel"]
    assert "set_distribution" in names["data_parallel"]
    assert "stateless_call" in names["gan_losses"]
    assert "jax.value_and_grad" in names["gan_step"] and "jax.jit" in names["gan_step"]


@pytest.fixture(scope="module")
def notebook_jax():
    """Notebook 05's JAX functions in one child with 8 simulated CPU devices."""
    process = JaxProcess(key="test-notebook-05")
    remote = {name: process.define(name, source)
              for name, source in functions_in_notebook(NOTEBOOK).items()}
    remote["devices"] = remote["start_keras_on_jax"](8)
    yield remote
    process.close()


def test_eight_simulated_jax_devices(notebook_jax):
    assert notebook_jax["devices"] == [f"cpu:{i}" for i in range(8)]


def test_one_and_eight_jax_devices_make_the_same_classifier_update(notebook_jax):
    step = notebook_jax["one_fit_step_on_jax"]
    one = step(256, 1, 64)
    eight = step(256, 8, 64, one["start"])
    diff = distribute.largest_difference({"1": one, "8": eight}, "1")["8"]
    # plain batch norm: under DataParallel the statistics are the global batch's
    assert diff["loss"] < 1e-5 and diff["weights"] < 1e-5 and diff["update"] < 1e-4, diff


@pytest.mark.heavy
def test_one_and_eight_jax_devices_make_the_same_gan_update_even_with_dropout(notebook_jax):
    train = notebook_jax["train_gan_on_jax"]
    runs = {n: train(256, n, 64, 1, 0.3) for n in (1, 8)}
    results = {n: {"loss": r["losses"][0], "start": r["start"], "weights": r["after_1"]}
               for n, r in runs.items()}
    diff = distribute.largest_difference(results, 1)[8]
    # Adam's first step moves each weight by about its learning rate (2e-4) in the direction
    # of its gradient: a gradient within rounding of zero may flip, moving one weight by up to
    # 2 learning rates; the update as a whole agrees. Dropout masks agree: JAX draws them for
    # the global batch
    assert diff["loss"] < 1e-5 and diff["weights"] <= 4.1e-4 and diff["update"] < 1e-2, diff


def test_fit_on_eight_jax_devices_keeps_steps_per_execution(notebook_jax):
    run = notebook_jax["fit_on_jax"](256, 8, 64, 2, 2, "mixed_bfloat16")
    assert run["images"] == 256 and len(run["loss"]) == 2 and len(run["seconds"]) == 2
    assert all(v == v for v in run["loss"]), "a finite loss under bfloat16"


def _code_names(path) -> set[str]:
    """Names, attributes and string constants used in a notebook's code cells (comments and
    prose do not count)."""
    import ast
    import json

    found = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:  # %pip
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
            elif isinstance(node, ast.keyword) and node.arg:
                found.add(node.arg)
    return found


@pytest.mark.parametrize(
    "engine, calls",
    [
        ("tf", ["TPUClusterResolver", "experimental_connect_to_cluster", "initialize_tpu_system",
                "TPUStrategy", "scope", "experimental_distribute_dataset",
                "distribute_datasets_from_function", "run", "reduce", "mixed_bfloat16",
                "steps_per_execution", "set_global_policy"]),
        ("jax", ["KERAS_BACKEND", "jax", "XLA_FLAGS", "list_devices", "DataParallel",
                 "set_distribution", "stateless_call", "value_and_grad", "stateless_apply",
                 "jit", "distribute_tensor", "fit"]),
    ],
)
def test_notebook_05_shows_each_engines_calls_in_its_code_cells(engine, calls):
    missing = [c for c in calls if c not in _code_names(NOTEBOOK)]
    assert not missing, f"{engine}: not in notebook 05's code cells: {missing}"
