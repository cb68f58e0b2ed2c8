"""Checks for notebook 08's exercises (scale out and profile)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from helpers.exercises import exercise, is_number, require


@exercise("08.1", "resume from the latest checkpoint",
          hint="`worker.py` above resumes the same way: find the newest checkpoint in the "
               "folder (there may be none), restore it into the checkpoint object, and read the "
               "step from the restored variable, not from the file's name.",
          right="A restarted worker picks up at the step its last checkpoint saved, with the "
                "weights of that step, and a first start begins at step 0.")
def resume(fn) -> str | None:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as folder:
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        weights = tf.Variable([0.0, 0.0])
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        got = fn(checkpoint, folder)  # nothing saved yet: a first start
        require(got)
        if not is_number(got):
            return (f"With no checkpoint yet it returned a {type(got).__name__}, not the step "
                    "to start from (an int).")
        if got != 0:
            return f"With no checkpoint yet it returned {got}, not step 0."
        manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=3)
        for saved in (100, 200, 300):  # saved every 100 steps: ckpt-1, ckpt-2, ckpt-3
            step.assign(saved)
            weights.assign([saved / 100, -saved / 100])
            manager.save()
        step.assign(0)  # a restarted worker: the variables as a fresh program makes them
        weights.assign([0.0, 0.0])
        got = fn(checkpoint, folder)
        require(got)
    restored = [float(w) for w in weights.numpy()]
    if not is_number(got):
        return f"It returned a {type(got).__name__}, not the step to start from (an int)."
    if restored == [0.0, 0.0]:
        return ("The weights are still those of a fresh start: restore the checkpoint "
                "(`checkpoint.restore(...)`), not only read its number.")
    if restored != [3.0, -3.0]:
        return (f"It restored the weights of step {int(restored[0] * 100)}, not those of the "
                "newest checkpoint (step 300): `tf.train.latest_checkpoint(directory)`.")
    if got != 300:
        why = (" That is the checkpoint's number in its name (ckpt-3), not the training step it "
               "saved." if got == 3 else "")
        return f"It returned {got}, not 300, the step the newest checkpoint saved.{why}"
    return None


@exercise("08.2", "profile notebook 04's step and name its first fix",
          hint="Three calls of this notebook do the work, as in the classifier's profile: "
               "`capture` (given a function that runs 04's step on the batch and returns one "
               "loss), `read_trace` on the file it returns, and `advice`.",
          right="You traced a real training step on this device, after its warm-up, with each "
                "step marked, and read from the trace what to fix first: the loop to use on "
                "your own model.")
def profile_gan(fn, advice) -> str | None:
    """``advice``: notebook 08's own reading of a trace, which the check cell passes."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as folder:
        got = fn(folder, 3, 16)
        try:  # a profiler left running makes the next capture fail
            tf.profiler.experimental.start(str(Path(folder) / "probe"))
        except Exception:  # noqa: BLE001  (TensorFlow says so with several error types)
            tf.profiler.experimental.stop()
            return ("The profiler was still running after your function returned: stop it in a "
                    "`finally` (`tf.profiler.experimental.stop()`), or the next capture fails.")
        tf.profiler.experimental.stop()
        require(got)
        if not isinstance(got, tuple) or len(got) != 2:
            return (f"It returned a {type(got).__name__}: return a pair, the trace's summary and "
                    "the first fix.")
        summary, fix = got
        if not hasattr(summary, "step_ms") or not hasattr(summary, "by_type"):
            return (f"The first value is a {type(summary).__name__}, not the summary that "
                    "`read_trace` returns.")
        if len(summary.step_ms) != 3:
            return (f"The trace has {len(summary.step_ms)} marked steps, not the 3 asked for "
                    "(`steps`).")
        if Path(folder).resolve() not in Path(summary.path).resolve().parents:
            return f"The trace {summary.path} was not written under `logdir`."
        names = " ".join(op.name for op in summary.ops).lower()
        if "generator" not in names or "discriminator" not in names:
            return ("The trace holds no op of a generator and a discriminator: it is not "
                    "notebook 04's DCGAN step (build it with `build_gan` and `make_train_step`).")
        if fix != (want := advice(summary)[0]):
            return (f"For this trace the first fix is {want[:70]!r}..., not {str(fix)[:70]!r}: "
                    "return `advice(summary)[0]`.")
    return None
