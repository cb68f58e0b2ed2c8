"""Checks for notebook 07's exercises (out of memory)."""

import math

import numpy as np

from helpers.exercises import exercise, is_number, require


def _budget(largest: int, calls: list):  # "does this batch fit": up to largest; records tries
    return lambda batch: calls.append(batch) or (is_number(batch) and batch <= largest)


@exercise("07.1", "find the largest batch under a budget",
          where="`find_max_batch` under \"Find what fits, automatically\", and its table of tries",
          hint="Double from 1 while `fits` says yes (never past `limit`), then bisect between "
               "the last batch that fit and the first that did not, until they are 1 apart.",
          right="It finds the largest batch in a few tries, each of which costs a training step "
                "(and maybe an OOM) for real.")
def largest_batch(fn) -> str | None:
    # (limit, largest that fits): no power of 2, nothing, all, and 600 (far from 512 and 1024)
    for limit, largest in ((8192, 37), (8192, 1), (100, 64), (3000, 3000), (8192, 0), (8192, 600)):
        calls = []
        got = fn(_budget(largest, calls), limit)
        if not calls:
            require(got)
        if wrong := [b for b in calls if not is_number(b) or not 1 <= b <= limit]:
            return (f"With limit={limit} it asked `fits({wrong[0]!r})`: try only whole batch "
                    f"sizes from 1 to {limit}.")
        if too_far := [b for b in calls if b > min(limit, max(1, 2 * largest))]:
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
        if len(calls) > most:
            return (f"Right answer, but it called `fits` {len(calls)} times (batches up to "
                    f"{largest} fit, limit {limit}); doubling, then bisecting, needs at most "
                    f"{most}.")
    return None


@exercise("07.2", "accumulate gradients over k micro-batches",
          where="`accumulated_gradients` and the cell that trains with it, under \"Reduce\"",
          hint="Under a `tf.GradientTape`, take each micro-batch's gradient and add it to a "
               "running sum; after every k-th, `optimizer.apply_gradients` with the sum divided "
               "by k, then start a new sum.",
          right="k micro-batches make the update of one batch k times larger, in the memory "
                "of one micro-batch.")
def train_accumulated(fn) -> str | None:
    import tensorflow as tf

    rng = np.random.default_rng(6)  # a tiny Dense model, 8 micro-batches of 4
    x, y = rng.normal(size=(32, 5)).astype("float32"), rng.integers(0, 3, size=32)
    weights = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=3).astype("float32")]
    micro, base, sizes = 4, tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), []

    def loss_fn(labels, logits):  # records how many examples each loss saw
        sizes.append(labels.shape[0])
        return base(labels, logits)

    def model_and_optimizer():
        model = tf.keras.Sequential([tf.keras.Input((5,)), tf.keras.layers.Dense(3)])
        model.set_weights(weights)
        return model, tf.keras.optimizers.SGD(learning_rate=0.5)

    def reference(k, mistake=None):  # the weights after one update per k micro-batches
        model, optimizer = model_and_optimizer()
        total = None
        for seen, start in enumerate(range(0, len(x), micro), start=1):
            with tf.GradientTape() as tape:
                loss = base(y[start:start + micro], model(x[start:start + micro], training=True))
            part = tape.gradient(loss, model.trainable_variables)
            total = part if total is None else [t + p for t, p in zip(total, part, strict=True)]
            if mistake == "every" or seen % k == 0:
                scale = 1.0 if mistake in ("sum", "every") else 1.0 / k
                optimizer.apply_gradients(
                    zip([t * scale for t in total], model.trainable_variables, strict=True))
                total = total if mistake == "no reset" else None
        return model.get_weights()

    def same(expected):
        return all(np.allclose(g, e, rtol=1e-4, atol=1e-5)
                   for g, e in zip(got, expected, strict=True))

    for k in (4, 2):  # two values: an answer's own k fits only one
        with tf.device("/CPU:0"):  # on every runtime: a GPU's TensorFloat-32 would blur it
            model, optimizer = model_and_optimizer()
            micro_batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(micro)
            sizes.clear()
            made = fn(model, optimizer, loss_fn, micro_batches, k)
            require(made)
            got, right = model.get_weights(), reference(k)
        if max(sizes, default=0) > micro:
            return (f"It computed one loss on {max(sizes)} examples: the micro-batches were put "
                    "back together, in the memory of the large batch. Take each micro-batch's "
                    "gradient on its own and add the gradients.")
        if same(right) and made != 8 // k:
            return f"The weights are right, but it returned {made!r}: it made {8 // k} updates."
        if same(right):
            continue
        if same(weights):
            return ("The model's weights did not change: apply the mean gradient every k "
                    "micro-batches.")
        if (updates := int(optimizer.iterations.numpy())) == 8 or same(reference(k, "every")):
            return (f"It updated the weights {updates} times for 8 micro-batches with k={k}: "
                    "one update per k micro-batches, not one per micro-batch.")
        if same(reference(k, "sum")):
            return ("Each update is k times too large: each micro-batch's loss is already a mean, "
                    "so divide the sum of the k gradients by k.")
        if same(reference(k, "no reset")):
            return ("The second update still holds the first one's gradients: start a new sum "
                    "after each update.")
        gap = max(float(np.abs(g - e).max()) for g, e in zip(got, right, strict=True))
        return (f"After 8 micro-batches with k={k}, the weights differ from those of {8 // k} "
                f"full-batch steps by up to {gap:.2g}.")
    return None
