"""Checks for notebook 07's exercises (scale out and profile).
"""

from __future__ import annotations

import math
import numbers
import tempfile

from helpers.exercises import exercise, require


@exercise("07.1", "resume from the latest checkpoint",
          hint="`tf.train.latest_checkpoint(directory)` names the newest checkpoint (None when "
               "there is none); `checkpoint.restore(it)` puts every tracked variable back; then "
               "return `int(checkpoint.step)`.",
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
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
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
        if isinstance(got, bool) or not isinstance(got, numbers.Integral):
            return f"It returned a {type(got).__name__}, not the step to start from (an int)."
        if restored == [0.0, 0.0]:
            return ("The weights are still those of a fresh start: restore the checkpoint "
                    "(`checkpoint.restore(...)`), not only read its number.")
        if restored != [3.0, -3.0]:
            return (f"It restored the weights of step {int(restored[0] * 100)}, not those of the "
                    "newest checkpoint (step 300): `tf.train.latest_checkpoint(directory)`.")
        if got != 300:
            why = (" That is the checkpoint's number in its name (ckpt-3), not the training "
                   "step it saved." if got == 3 else "")
            return f"It returned {got}, not 300, the step the newest checkpoint saved.{why}"
    return None


@exercise("07.2", "compute the scaling efficiency",
          hint="The speedup is images/s over the smallest replica count's images/s; divide it "
               "by how many times more replicas that is (n / smallest).",
          right="Efficiency says how much of each added device's throughput you keep.")
def scaling_efficiency(fn) -> str | None:
    cases = [
        ({4: 3000.0, 1: 1000.0, 2: 1800.0}, {1: 1.0, 2: 0.9, 4: 0.75}),  # not in replica order
        ({2: 1000.0, 8: 2000.0}, {2: 1.0, 8: 0.5}),  # the smallest count measured is 2
        # one replica faster than two (logical devices of one chip): the baseline is the
        # smallest replica count, not the slowest
        ({2: 1000.0, 1: 1250.0, 4: 2000.0}, {1: 1.0, 2: 0.4, 4: 0.4}),
    ]
    for measured, expected in cases:
        got = fn(dict(measured))
        require(got)
        if not isinstance(got, dict):
            return f"It returned a {type(got).__name__}, not a dict {{replicas: efficiency}}."
        if sorted(got) != sorted(expected):
            return f"For {measured} it has keys {sorted(got)}, not {sorted(expected)}."
        for count, want in expected.items():
            value = got[count]
            if not isinstance(value, int | float) or not math.isclose(value, want, rel_tol=1e-6):
                speedup = measured[count] / measured[min(measured)]
                if isinstance(value, int | float) and math.isclose(value, speedup, rel_tol=1e-6):
                    return (f"For {count} replicas it gave {value:g}, the speedup: efficiency "
                            f"divides it by {count // min(measured)} (replicas / smallest).")
                return (f"For images/s {measured} it gave {value!r} at {count} replicas, "
                        f"not {want:g}.")
    return None
