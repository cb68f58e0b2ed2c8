"""Checks for notebook 07's exercises (out of memory)."""

from __future__ import annotations

import math
import numbers

import numpy as np

from helpers.exercises import exercise, is_number, require


class _Budget:
    """A stand-in for "does a step at this batch size fit": up to ``largest``; it records tries."""

    def __init__(self, largest: int):
        self.largest, self.calls = largest, []

    def __call__(self, batch) -> bool:
        self.calls.append(batch)
        return isinstance(batch, numbers.Integral) and batch <= self.largest


@exercise("07.1", "find the largest batch under a budget",
          hint="Double from 1 while `fits` says yes (never past `limit`), then bisect between "
               "the last batch that fit and the first that did not, until they are 1 apart.",
          right="It finds the largest batch in a few tries, each of which costs a training step "
                "(and maybe an OOM) for real.")
def largest_batch(fn) -> str | None:
    # (limit, largest batch that fits): a limit that is no power of 2, nothing fits, all fits
    for limit, largest in ((8192, 37), (8192, 1), (100, 64), (3000, 3000), (8192, 0)):
        fits = _Budget(largest)
        got = fn(fits, limit)
        if not fits.calls:
            require(got)
        if wrong := [b for b in fits.calls if not is_number(b) or not 1 <= b <= limit]:
            return (f"With limit={limit} it asked `fits({wrong[0]!r})`: try only whole batch "
                    f"sizes from 1 to {limit}.")
        if too_far := [b for b in fits.calls if b > min(limit, max(1, 2 * largest))]:
            return (f"With batches up to {largest} fitting, it tried {too_far[0]} (limit {limit}): "
                    "each try that does not fit costs a step and an OOM. Double from 1, so that "
                    "the first batch that fails is at most twice the largest that fits, then "
                    "bisect (plain bisection starts at limit / 2).")
        if got is None and largest == 0:
            return "When even batch 1 does not fit, return 0 (it returned None)."
        require(got)
        if not is_number(got):
            return f"It returned a {type(got).__name__} ({got!r}), not an int."
        if got != largest:
            if largest == limit:
                return (f"When every batch up to limit={limit} fits, the answer is {limit}; it "
                        f"returned {got}: double up to `min(2 * batch, limit)`.")
            if got < largest and got & (got - 1) == 0:
                return (f"Batches up to {largest} fit, and it returned {got}, the last doubling "
                        "that fit: bisect between it and the first that did not.")
            return f"Batches up to {largest} fit (limit {limit}), and it returned {got}."
        most = 2 * math.ceil(math.log2(limit)) + 2  # doubling from 1, then bisecting, and room
        if len(fits.calls) > most:
            return (f"Right answer, but it called `fits` {len(fits.calls)} times (batches up to "
                    f"{largest} fit, limit {limit}); doubling, then bisecting, needs at most "
                    f"{most}.")
    return None


@exercise("07.2", "accumulate gradients over k micro-batches",
          hint="Under a `tf.GradientTape`, take each micro-batch's gradient and add it to a "
               "running sum; after every k-th, `optimizer.apply_gradients` with the sum divided "
               "by k, then start a new sum.",
          right="k micro-batches make exactly the update of one batch k times larger, in the "
                "memory of one micro-batch.")
def train_accumulated(fn) -> str | None:
    import tensorflow as tf

    rng = np.random.default_rng(6)  # a tiny Dense model, 8 micro-batches of 4: two updates
    x = rng.normal(size=(32, 5)).astype("float32")
    y = rng.integers(0, 3, size=32)
    weights = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=3).astype("float32")]
    k, micro = 4, 4
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def model_and_optimizer():
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
        model.set_weights(weights)
        return model, tf.keras.optimizers.SGD(learning_rate=0.5)

    def reference(mistake=None):  # the weights after one update per k micro-batches, or a mistake
        model, optimizer = model_and_optimizer()
        total = None
        for seen, start in enumerate(range(0, len(x), micro), start=1):
            with tf.GradientTape() as tape:
                loss = loss_fn(y[start:start + micro], model(x[start:start + micro], training=True))
            part = tape.gradient(loss, model.trainable_variables)
            total = part if total is None else [t + p for t, p in zip(total, part, strict=True)]
            if mistake == "every" or seen % k == 0:
                scale = 1.0 if mistake in ("sum", "every") else 1.0 / k
                optimizer.apply_gradients(
                    zip([t * scale for t in total], model.trainable_variables, strict=True))
                if mistake != "no reset":
                    total = None
        return model.get_weights()

    def same(expected):
        return all(np.allclose(g, e, rtol=1e-4, atol=1e-5)
                   for g, e in zip(got, expected, strict=True))

    with tf.device("/CPU:0"):  # on every runtime: a GPU's TensorFloat-32 would blur the comparison
        model, optimizer = model_and_optimizer()
        micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(micro)
        made = fn(model, optimizer, loss_fn, micro_batches, k)
        require(made)
        got, right = model.get_weights(), reference()
        if same(right) and made != 2:
            return f"The weights are right, but it returned {made!r}: it made 2 updates."
        if same(right):
            return None
        if same(weights):
            return ("The model's weights did not change: apply the mean gradient every k "
                    "micro-batches.")
        if (updates := int(optimizer.iterations.numpy())) == 8 or same(reference("every")):
            return (f"It updated the weights {updates} times for 8 micro-batches with k={k}: "
                    "one update per k micro-batches, not one per micro-batch.")
        if same(reference("sum")):
            return ("Each update is k times too large: each micro-batch's loss is already a mean, "
                    "so divide the sum of the k gradients by k.")
        if same(reference("no reset")):
            return ("The second update still holds the first one's gradients: start a new sum "
                    "after each update.")
        gap = max(float(np.abs(g - e).max()) for g, e in zip(got, right, strict=True))
        return (f"After 8 micro-batches with k={k}, the weights differ from those of 2 full-batch "
                f"steps by up to {gap:.2g}.")
