"""Notebook 08's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

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


# 08.1: resume from the latest checkpoint


def test_07_1_right(solved):
    result = check("08.1", solved["resume"])
    assert result.passed, result.message


def test_07_1_untouched():
    def resume(checkpoint, directory):
        """docstring"""
        ...

    assert "still holds its placeholder" in check("08.1", resume).message


def via_manager(checkpoint, directory):  # the manager finds the newest as well
    import tensorflow as tf

    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None)
    checkpoint.restore(manager.latest_checkpoint).expect_partial()  # None: nothing to restore
    return checkpoint.step.numpy().item()


def with_numpy_step(checkpoint, directory):
    import tensorflow as tf

    if path := tf.train.latest_checkpoint(directory):
        checkpoint.read(path).assert_existing_objects_matched()
    return checkpoint.step.numpy()  # a NumPy int64 is an integer


def oldest(checkpoint, directory):
    import tensorflow as tf

    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
    if manager.checkpoints:
        checkpoint.restore(manager.checkpoints[0])
    return int(checkpoint.step)


def number_in_the_name(checkpoint, directory):
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    if not latest:
        return 0
    checkpoint.restore(latest)
    return int(latest.rsplit("-", 1)[1])


def not_restored(checkpoint, directory):
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    return int(tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE")) if latest else 0


def returns_the_status(checkpoint, directory):
    import tensorflow as tf

    return checkpoint.restore(tf.train.latest_checkpoint(directory))


@pytest.mark.parametrize("answer", [via_manager, with_numpy_step])
def test_07_1_right_written_otherwise(answer):
    result = check("08.1", answer)
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (oldest, "not those of the newest checkpoint"),
    (number_in_the_name, "(ckpt-3)"),
    (not_restored, "restore the checkpoint"),
    (returns_the_status, "not the step to start from"),
])
def test_07_1_wrong(answer, expected):
    result = check("08.1", answer)
    assert not result.passed and expected in result.message, result.message


# 08.2: profile notebook 04's step and name its first fix


@pytest.fixture(scope="module")
def profiling(tf):
    """What 08's cells give the exercise: capture, read_trace, advice, and 04's step."""
    from helpers.lessons import nb04 as dcgan
    from helpers.lessons.nb08 import advice, capture

    return SimpleNamespace(tf=tf, capture=capture, advice=advice, read=scale_out_profile.read_trace,
                           build_gan=dcgan.build_gan, make_train_step=dcgan.make_train_step,
                           names=dict(tf=tf, capture=capture, advice=advice,
                                      scale_out_profile=scale_out_profile))


def gan_step(p, batch_size):
    nets = p.build_gan("tutorial", (28, 28, 1), "float32")
    step = p.make_train_step(*nets, p.tf.random.Generator.from_seed(0))
    real = p.tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
    return lambda: step(real)[0]


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


def test_07_2_right(profiling):
    solved = solution_functions("08_scale_out_profile", **profiling.names)
    result = check("08.2", solved["profile_gan"], advice=profiling.advice)
    assert result.passed, result.message


def test_07_2_untouched():
    def profile_gan(logdir, steps=5, batch_size=64):
        """docstring"""
        ...

    assert "still holds its placeholder" in check("08.2", profile_gan, advice=len).message


@pytest.mark.parametrize("answer", [own_loop, mixed_bfloat16])
def test_07_2_right_written_otherwise(profiling, answer):
    result = check("08.2", answer(profiling), advice=profiling.advice)
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (never_stopped, "still running"),
    (all_the_advice, "return `advice(summary)[0]`"),
    (a_matmul_step, "no op of a generator and a discriminator"),
    (five_steps_always, "not the 3 asked for"),
])
def test_07_2_wrong(profiling, answer, expected):
    result = check("08.2", answer(profiling), advice=profiling.advice)
    assert not result.passed and expected in result.message, result.message
