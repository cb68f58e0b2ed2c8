"""Notebook 08's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from solved import solution_functions

from helpers import scale_out_profile
from helpers.exercises import check


@pytest.fixture(scope="module")
def solved(tf):
    """The solutions learners are given, with the notebook's names they use."""
    return solution_functions("08_scale_out_profile", tf=tf)


# 08.1: the chief's shared folder and each worker's scratch folder


def test_08_1_right(solved):
    result = check("08.1", solved["checkpoint_dir"])
    assert result.passed, result.message


def test_08_1_untouched():
    def checkpoint_dir(tf_config, shared, scratch):
        """docstring"""
        ...

    assert "still holds its placeholder" in check("08.1", checkpoint_dir).message


def with_pathlib(tf_config, shared, scratch):  # a Path, made on disk, named by index alone
    cluster = tf_config.get("cluster", {})
    task = tf_config.get("task") or {"type": "chief", "index": 0}
    if "chief" in cluster:
        is_chief = task["type"] == "chief"
    else:
        is_chief = task["index"] == 0
    if is_chief:
        return Path(shared)
    folder = Path(scratch) / f"task{task['index']}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def with_early_returns(tf_config, shared, scratch):
    if not tf_config:
        return shared
    kind = tf_config["task"]["type"]
    index = tf_config["task"]["index"]
    if kind == "chief":
        return shared
    if kind == "worker" and index == 0 and "chief" not in tf_config["cluster"]:
        return shared
    return os.path.join(scratch, kind + "-" + str(index))


def as_a_pair(tf_config, shared, scratch):
    if "task" not in tf_config:
        return shared
    chief_type = "chief" if "chief" in tf_config["cluster"] else "worker"
    me = (tf_config["task"]["type"], tf_config["task"]["index"])
    return shared if me == (chief_type, 0) else f"{scratch}/{me[0]}_{me[1]}"


@pytest.mark.parametrize("answer", [with_pathlib, with_early_returns, as_a_pair])
def test_08_1_right_written_otherwise(answer):
    result = check("08.1", answer)
    assert result.passed, result.message


def worker_zero_always(tf_config, shared, scratch):  # worker.py's rule, copied
    if tf_config.get("task", {}).get("index", 0) == 0:
        return shared
    return f"{scratch}/worker_{tf_config['task']['index']}"


def chief_type_only(tf_config, shared, scratch):
    if tf_config.get("task", {}).get("type") == "chief" or not tf_config:
        return shared
    return f"{scratch}/{tf_config['task']['index']}"


def one_scratch_for_all(tf_config, shared, scratch):
    task = tf_config.get("task", {"type": "chief"})
    cluster = tf_config.get("cluster", {})
    chief = task["type"] == "chief" or ("chief" not in cluster and task["index"] == 0)
    return shared if chief else scratch


def scratch_in_the_bucket(tf_config, shared, scratch):  # as the tutorials' write_filepath
    task = tf_config.get("task", {"type": "chief", "index": 0})
    cluster = tf_config.get("cluster", {})
    if task["type"] == "chief" or ("chief" not in cluster and task["index"] == 0):
        return shared
    return f"{shared}/workertemp_{task['index']}"


def everyone_shares(tf_config, shared, scratch):
    return shared


def assumes_a_cluster(tf_config, shared, scratch):
    task, cluster = tf_config["task"], tf_config["cluster"]
    chief = task["type"] == "chief" or ("chief" not in cluster and task["index"] == 0)
    return shared if chief else f"{scratch}/{task['type']}{task['index']}"


@pytest.mark.parametrize(("answer", "expected"), [
    (worker_zero_always, "worker 0 included"),
    (chief_type_only, "worker 0 is the chief, yet"),
    (one_scratch_for_all, "write over each other's files"),
    (scratch_in_the_bucket, "not a folder under `scratch`"),
    (everyone_shares, "also saves into the shared folder"),
    (assumes_a_cluster, "raised KeyError"),
])
def test_08_1_wrong(answer, expected):
    result = check("08.1", answer)
    assert not result.passed and expected in result.message, result.message


def _from_environ(tf_config):  # the rule of the solution, read back from TF_CONFIG
    config = json.loads(os.environ["TF_CONFIG"])
    cluster, task = config.get("cluster", {}), config.get("task", {"type": "chief", "index": 0})
    return task["type"] == "chief" or ("chief" not in cluster and task["index"] == 0), task


def sets_tf_config(tf_config, shared, scratch):  # as worker.py's process would find it
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    chief, task = _from_environ(tf_config)
    return shared if chief else f"{scratch}/{task['type']}_{task['index']}"


def sets_and_deletes_tf_config(tf_config, shared, scratch):  # removes the kernel's own
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    chief, task = _from_environ(tf_config)
    del os.environ["TF_CONFIG"]
    return shared if chief else f"{scratch}/{task['type']}_{task['index']}"


def records_the_folder(tf_config, shared, scratch):
    task = tf_config.get("task", {"type": "chief", "index": 0})
    chief = task["type"] == "chief" or ("chief" not in tf_config.get("cluster", {})
                                        and task["index"] == 0)
    os.environ["CHECKPOINT_DIR"] = shared if chief else f"{scratch}/{task['type']}{task['index']}"
    return os.environ["CHECKPOINT_DIR"]


def sets_tf_config_and_puts_it_back(tf_config, shared, scratch):
    before = os.environ.get("TF_CONFIG")
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    try:
        chief, task = _from_environ(tf_config)
    finally:
        if before is None:
            del os.environ["TF_CONFIG"]
        else:
            os.environ["TF_CONFIG"] = before
    return shared if chief else f"{scratch}/{task['type']}_{task['index']}"


@pytest.mark.parametrize(("answer", "kernel_has", "left"), [
    (sets_tf_config, None, "It left TF_CONFIG changed in `os.environ`"),
    (sets_tf_config, '{"task": {"type": "worker", "index": 1}}', "It left TF_CONFIG changed"),
    (sets_and_deletes_tf_config, '{"cluster": {}}', "It left TF_CONFIG changed"),
    (records_the_folder, None, "It left CHECKPOINT_DIR changed"),
])
def test_08_1_wrong_when_it_leaves_the_environment_changed(answer, kernel_has, left, monkeypatch):
    """Previously accepted: each names the right folders. The check puts the kernel's
    environment back, whatever the answer did."""
    monkeypatch.delenv("CHECKPOINT_DIR", raising=False)
    if kernel_has is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", kernel_has)
    before = dict(os.environ)
    result = check("08.1", answer)
    assert not result.passed and left in result.message, result.message
    assert dict(os.environ) == before


@pytest.mark.parametrize("kernel_has", [None, '{"cluster": {}}'])
def test_08_1_right_when_it_puts_the_environment_back(kernel_has, monkeypatch):
    if kernel_has is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", kernel_has)
    result = check("08.1", sets_tf_config_and_puts_it_back)
    assert result.passed, result.message
    assert os.environ.get("TF_CONFIG") == kernel_has


def test_08_1_a_raising_answer_leaves_the_environment_as_it_was(monkeypatch):
    def raises(tf_config, shared, scratch):
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
        return tf_config["cluster"]["chief"][0]  # KeyError, after setting it

    monkeypatch.delenv("TF_CONFIG", raising=False)
    result = check("08.1", raises)
    assert not result.passed and "raised KeyError" in result.message, result.message
    assert "TF_CONFIG" not in os.environ


# 08.2: profile notebook 04's step and name its first fix


@pytest.fixture(scope="module")
def profiling(tf):
    """What 08's cells give the exercise: capture, read_trace, advice, and 04's step."""
    from helpers.lessons import nb04 as dcgan
    from helpers.lessons.nb08 import advice, capture

    return SimpleNamespace(tf=tf, capture=capture, advice=advice, read=scale_out_profile.read_trace,
                           build_gan=dcgan.build_gan, make_train_step=dcgan.make_train_step,
                           names=dict(tf=tf, capture=capture, advice=advice,
                                      scale_out_profile=scale_out_profile),
                           steps={})


def gan_step(p, batch_size):
    """04's step on a batch of `batch_size`: built and traced once per size for this module's
    answers (what they do with it, not how often they build it, is what the check judges)."""
    if batch_size not in p.steps:
        nets = p.build_gan("tutorial", (28, 28, 1), "float32")
        step = p.make_train_step(*nets, p.tf.random.Generator.from_seed(0))
        real = p.tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
        p.steps[batch_size] = lambda: step(real)[0]
    return p.steps[batch_size]


def own_loop(p):
    """Right, written otherwise: its own marked loop, the profiler stopped in a finally."""
    def profile_gan(logdir, steps=5, batch_size=64):
        step = gan_step(p, batch_size)
        for _ in range(3):
            step().numpy()
        p.tf.profiler.experimental.start(logdir)
        try:
            for number in range(steps):
                with p.tf.profiler.experimental.Trace("train", step_num=number, _r=1):
                    step().numpy()
        finally:
            p.tf.profiler.experimental.stop()
        files = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"))
        summary = p.read(files[-1])
        return summary, p.advice(summary)[0]
    return profile_gan


def mixed_bfloat16(p):
    """Right, written otherwise: another policy is still notebook 04's step."""
    def profile_gan(logdir, steps=5, batch_size=64):
        nets = p.build_gan("tutorial", (28, 28, 1), "mixed_bfloat16")
        step = p.make_train_step(*nets, p.tf.random.Generator.from_seed(1))
        real = p.tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
        summary = p.read(p.capture(lambda: step(real)[1], steps, logdir, warmup=2))
        return summary, p.advice(summary)[0]
    return profile_gan


def profile_context(p):
    """Right, written otherwise: the profiler's context manager, the newest trace file read."""
    def profile_gan(logdir, steps=5, batch_size=64):
        step = gan_step(p, batch_size)
        step()
        step()
        with p.tf.profiler.experimental.Profile(logdir):
            for i in range(steps):
                with p.tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                    float(step())
        newest = max(Path(logdir).rglob("*.xplane.pb"), key=lambda f: f.stat().st_mtime)
        summary = p.read(newest)
        return summary, p.advice(summary)[0]
    return profile_gan


def own_folder(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        mine = tempfile.mkdtemp()  # not the logdir it was given
        summary = p.read(p.capture(gan_step(p, batch_size), steps, mine))
        return summary, p.advice(summary)[0]
    return profile_gan


def raises_while_tracing(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        p.tf.profiler.experimental.start(logdir)
        for number in range(steps):
            with p.tf.profiler.experimental.Trace("train", step_num=number, _r=1):
                gan_step(p, batch_size)().nump()  # a typo: raises, the profiler left running
        p.tf.profiler.experimental.stop()
    return profile_gan


def never_stopped(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        step = gan_step(p, batch_size)
        step().numpy()
        p.tf.profiler.experimental.start(logdir)
        for number in range(steps):
            with p.tf.profiler.experimental.Trace("train", step_num=number, _r=1):
                step().numpy()
        return None, "forgot to stop"
    return profile_gan


def all_the_advice(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        summary = p.read(p.capture(gan_step(p, batch_size), steps, logdir))
        return summary, p.advice(summary)  # the list, not its first line
    return profile_gan


def a_matmul_step(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        a = p.tf.random.normal((256, 256))
        summary = p.read(p.capture(p.tf.function(lambda: p.tf.reduce_sum(a @ a)), steps, logdir))
        return summary, p.advice(summary)[0]
    return profile_gan


def five_steps_always(p):
    def profile_gan(logdir, steps=5, batch_size=64):
        summary = p.read(p.capture(gan_step(p, batch_size), 5, logdir))
        return summary, p.advice(summary)[0]
    return profile_gan


def fixed_sizes(p, steps=None, batch_size=None):
    """Wrong: a size written in (the text's 3 steps of 16 images, or the defaults)."""
    def profile_gan(logdir, steps_asked=5, batch_size_asked=64):
        step = gan_step(p, batch_size or batch_size_asked)
        summary = p.read(p.capture(step, steps or steps_asked, logdir))
        return summary, p.advice(summary)[0]
    return profile_gan


def test_08_2_right(profiling):
    solved = solution_functions("08_scale_out_profile", **profiling.names)
    result = check("08.2", solved["profile_gan"], advice=profiling.advice)
    assert result.passed, result.message


def test_08_2_untouched():
    def profile_gan(logdir, steps=5, batch_size=64):
        """docstring"""
        ...

    assert "still holds its placeholder" in check("08.2", profile_gan, advice=len).message


@pytest.mark.parametrize("answer", [own_loop, mixed_bfloat16, profile_context])
def test_08_2_right_written_otherwise(profiling, answer):
    result = check("08.2", answer(profiling), advice=profiling.advice)
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (never_stopped, "still running"),
    (all_the_advice, "return `advice(summary)[0]`"),
    (a_matmul_step, "no op of a generator and a discriminator"),
    (five_steps_always, "not the 3 asked for"),
    (own_folder, "not written under `logdir`"),
    (raises_while_tracing, "raised AttributeError"),
])
def test_08_2_wrong(profiling, answer, expected):
    result = check("08.2", answer(profiling), advice=profiling.advice)
    assert not result.passed and expected in result.message, result.message


@pytest.mark.parametrize(("sizes", "expected"), [
    ({"batch_size": 16}, "ran on batches of 16, not `batch_size`, 24."),  # the task's 16
    ({"batch_size": 64}, "ran on batches of 64, not `batch_size`, 16."),  # the default
    ({"steps": 3}, "The trace has 3 marked steps, not the 2 asked for"),
])
def test_08_2_wrong_with_a_size_written_in(profiling, sizes, expected):
    """Previously accepted: the check passed 3 steps of 16 images only, and never read the
    batch size off the trace."""
    result = check("08.2", fixed_sizes(profiling, **sizes), advice=profiling.advice)
    assert not result.passed and expected in result.message, result.message


def test_08_2_a_failed_try_leaves_no_profiler_to_fail_the_next(profiling, tmp_path):
    """A try that raised with the profiler running (in the check, or in the learner's own cell)
    must not make the corrected answer fail with "Another profiler is running"."""
    failed = check("08.2", raises_while_tracing(profiling), advice=profiling.advice)
    assert not failed.passed and "raised AttributeError" in failed.message, failed.message
    profiling.tf.profiler.experimental.start(str(tmp_path))  # the cell's own try
    with pytest.raises(profiling.tf.errors.AlreadyExistsError):
        profiling.tf.profiler.experimental.start(str(tmp_path))
    result = check("08.2", own_loop(profiling), advice=profiling.advice)
    assert result.passed, result.message
