import ast
import os

import pytest

from helpers import errors, params, scale_out_profile
from helpers.params import ParameterError


def test_valid_values_pass_through(capsys):
    p = params.validate(
        epochs=(3, params.integer(1)),
        lr=(1, params.number(0, 1)),
        dataset=("mnist", params.one_of("mnist", "cifar10")),
        mixed=(True, params.boolean()),
    )
    assert (p.epochs, p.lr, p.dataset, p.mixed) == (3, 1.0, "mnist", True)
    assert capsys.readouterr().out == "Parameters: epochs=3, lr=1.0, dataset='mnist', mixed=True\n"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ((-1, params.integer(1)), "Invalid parameter x=-1: expected an integer >= 1."),
        ((9, params.integer(1, 8)), "Invalid parameter x=9: expected an integer from 1 to 8."),
        ((2.5, params.integer(1)), "Invalid parameter x=2.5: expected an integer >= 1."),
        ((True, params.integer(0)), "Invalid parameter x=True: expected an integer >= 0."),
        (("10", params.integer(0)), "Invalid parameter x='10': expected an integer >= 0."),
        ((2, params.number(0, 1)), "Invalid parameter x=2: expected a number from 0 to 1."),
        (("yes", params.boolean()), "Invalid parameter x='yes': expected True or False."),
        (
            ("svhn", params.one_of("mnist")),
            "Invalid parameter x='svhn': allowed values are 'mnist'.",
        ),
        (
            (10, params.check(lambda v: v % 8 == 0, "expected a multiple of 8")),
            "Invalid parameter x=10: expected a multiple of 8.",
        ),
    ],
)
def test_invalid_values_fail_with_one_line_naming_parameter_value_and_rule(spec, expected):
    with pytest.raises(ParameterError) as error:
        params.validate(echo=False, x=spec)
    assert str(error.value) == expected
    assert "\n" not in str(error.value)


def test_list_of_checks_every_item_and_reports_the_whole_list():
    rule = params.list_of(params.integer(16, 64), "expected a list of integers from 16 to 64")
    assert rule("sizes", (16, 32)) == [16, 32]
    for bad in ([16, 128], [], 32, [16, 16]):
        with pytest.raises(ParameterError) as error:
            rule("sizes", bad)
        assert str(error.value).startswith(f"Invalid parameter sizes={bad!r}: expected a list")


def test_all_of_reports_the_first_failing_rule():
    rule = params.all_of(params.integer(1), params.check(lambda v: v % 2 == 0, "expected even"))
    assert rule("b", 4) == 4
    with pytest.raises(ParameterError, match="expected even"):
        rule("b", 3)


def test_a_spec_that_is_not_a_pair_is_a_programming_error():
    with pytest.raises(TypeError):
        params.validate(x=3)


def test_ipython_shows_a_parameter_error_as_one_line():
    class Shell:
        def set_custom_exc(self, types, handler):
            self.types, self.handler = types, handler

        def _showtraceback(self, etype, value, stb):
            self.shown = stb

    shell = Shell()
    import IPython

    original = IPython.get_ipython
    IPython.get_ipython = lambda: shell
    try:
        errors.show_as_one_line()
    finally:
        IPython.get_ipython = original
    assert shell.types[0] is ParameterError
    assert set(errors.ONE_LINE_ERRORS) <= set(shell.types)  # the course's other errors too
    error = ParameterError("Invalid parameter x=-1: expected an integer >= 1.")
    lines = shell.handler(shell, ParameterError, error, None)
    assert lines == ["ParameterError: Invalid parameter x=-1: expected an integer >= 1."]
    assert shell.shown == lines  # sent to the notebook as the error, not just returned


def test_numbers_must_be_finite():
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ParameterError, match="a finite one"):
            params.number(0, 1000)("decode_ms", bad)
    assert params.number(0, 1000)("decode_ms", 20) == 20.0
    with pytest.raises(ParameterError, match="a finite one"):  # not an OverflowError
        params.number(0, 1000)("decode_ms", 10**400)


def test_a_folder_name_with_a_quote_or_a_line_break_is_refused_before_any_work():
    """08 writes its worker with %%writefile "{worker_py}": a quote would fail minutes later."""
    for bad in ('runs "a"', "runs\nb"):
        with pytest.raises(ParameterError, match="without quotes or line breaks"):
            params.folder()("work_dir", bad)


def test_one_of_is_strict_about_booleans_and_numbers():
    rule = params.one_of(True, False, "auto")
    assert rule("use_drive", True) is True and rule("use_drive", "auto") == "auto"
    for bad in (1, 0, 1.0):
        with pytest.raises(ParameterError, match=rf"use_drive={bad!r}: allowed values"):
            rule("use_drive", bad)
    with pytest.raises(ParameterError):
        params.one_of(1, 2)("count", True)


def test_a_list_of_lists_is_refused_in_one_line():
    rule = params.list_of(params.integer(1), "a list of positive integers")
    with pytest.raises(ParameterError, match=r"batch_sizes=\[\[1\]\]: a list of positive"):
        rule("batch_sizes", [[1]])


def test_a_tilde_is_refused_with_the_full_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParameterError, match=r"~ is not expanded here: give the full path \(/"):
        params.folder()("work_dir", "~/runs")
    assert not (tmp_path / "~").exists()
    assert os.path.expanduser("~/runs") != "~/runs"


def test_enough_images_for_the_global_batches():
    rule = params.enough_images(64)
    assert rule("max_images", 128) == 128
    with pytest.raises(ParameterError, match=r"max_images=100: at least 2 global batches \(128"):
        rule("max_images", 100)
    assert params.enough_images(64, batches=1)("max_images", 64) == 64
    assert params.enough_images("64")("max_images", 1) == 1, "the batch's own rule reports it"


def test_a_count_that_would_fill_the_hosts_memory_is_refused(monkeypatch):
    """03's num_images=1000000 with cifar10 took 24 GiB and the kernel was killed."""
    monkeypatch.setattr(params, "proc_kib", lambda path, key: 12 * 2**20)  # KiB of MemAvailable
    rule = params.fits_in_memory(32 * 32 * 3 * 8)
    assert rule("num_images", 10_000) == 10_000
    with pytest.raises(ParameterError, match=r"^Invalid parameter num_images=1000000: at most "
                                             r"262,144 images on this runtime: they would take "
                                             r"about 22\.9 GiB, and it has 12\.0 GiB"):
        rule("num_images", 1_000_000)
    monkeypatch.setattr(params, "proc_kib", lambda path, key: None)  # unknown: not refused
    assert rule("num_images", 1_000_000) == 1_000_000


class Shell:
    """Enough of IPython's shell for validate: the inputs run so far (``In``) and the names."""
    def __init__(self, *cells, **names):
        self.user_ns = {"In": ["", *cells], **names}

    def set_custom_exc(self, *args):
        pass


PARAMETERS_CELL = 'max_images: int = 60000  # images\nbatch_size: int = 256  # images per step\n'


@pytest.mark.parametrize("injected, name, hint", [
    ("max_image = 128\n", "max_image", "the nearest is max_images"),
    ("batchsize = 64\nmax_images = 128\n", "batchsize", "the nearest is batch_size"),
    ("learning_rate = 0.1\n", "learning_rate", "it has max_images, batch_size")])
def test_a_misspelled_papermill_parameter_is_refused_naming_the_nearest(
        monkeypatch, injected, name, hint):
    """papermill injects every name it is given: one it does not know would be ignored."""
    value = ast.literal_eval(injected.split("= ")[1].split("\n")[0])
    shell = Shell(PARAMETERS_CELL, "# Parameters\n" + injected, "check()", **{name: value})
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    with pytest.raises(ParameterError) as error:
        params.validate(max_images=(128, params.integer(64)))
    assert str(error.value) == (f"Invalid parameter {name}={value!r}: this notebook has no "
                                f"parameter {name} ({hint}).")


def test_known_papermill_parameters_and_runs_without_papermill_pass(monkeypatch, capsys):
    for shell in (Shell(PARAMETERS_CELL, "# Parameters\nmax_images = 128\n", "check()"),
                  Shell(PARAMETERS_CELL, "check()"),  # a learner's Run all
                  Shell("x = 1", "# Parameters\ny = 2\n")):  # no typed parameters cell before it
        monkeypatch.setattr("IPython.get_ipython", lambda shell=shell: shell)
        assert params.validate(max_images=(128, params.integer(64))).max_images == 128


@pytest.mark.parametrize("settings, message", [
    (dict(global_batch_size=512, max_images=256),
     "global_batch_size=512: at most max_images=256, the images it trains on"),
    (dict(global_batch_size=10**9, max_images=256),
     "global_batch_size=1000000000: at most max_images=256, the images it trains on"),
    (dict(per_replica_batch=512, replicas=8, max_images=2048), "per_replica_batch=512: at most "
     "256: the sweep's widest global batch, per_replica_batch x replicas=8, must fit in "
     "max_images=2048")])
def test_notebook_08_refuses_a_batch_larger_than_its_images(settings, message):
    given = dict(replicas=2, per_replica_batch=32, scaling_epochs=2, split_rounds=2,
                 max_images=1024, workers=2, global_batch_size=64, worker_steps=8,
                 checkpoint_every=4, kill_at_step=6, profile_steps=2, decode_ms=0,
                 work_dir="course_runs/x", open_ports=False)
    assert scale_out_profile.check_parameters(**given).max_images == 1024
    with pytest.raises(ParameterError, match="^Invalid parameter max_images=10: "):  # its own rule
        scale_out_profile.check_parameters(**{**given, "max_images": 10})
    with pytest.raises(ParameterError) as error:
        scale_out_profile.check_parameters(**{**given, **settings})
    assert str(error.value) == f"Invalid parameter {message}."
