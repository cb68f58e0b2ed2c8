"""Is my model input-bound? Time the same training steps fed from memory and fed by a pipeline.
"""

from __future__ import annotations

import statistics

from helpers.throughput import epoch_timer

#: What to try, in order, when a model waits for its input.
ADVICE = [
    "prefetch(tf.data.AUTOTUNE) as the last step, so input and training overlap",
    "map(..., num_parallel_calls=tf.data.AUTOTUNE) for decoding and augmentation",
    "cache() after decoding, when the decoded data fits in memory",
    "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) over several files",
    "batch before an expensive map, and write that map for a whole batch (vectorise)",
    "move augmentation into the model (Keras preprocessing layers) to run it on the GPU",
]

THRESHOLD = 1.15  # a pipeline-fed epoch within 15% of the compute-only one is not input-bound


def input_bound(model, dataset, steps: int, epochs: int = 3, full_pass_first: bool = True) -> dict:
    """Compare steady-state epochs of ``steps`` steps: one real batch repeated from memory
    (compute only) against batches from ``dataset`` (compute plus input). The two
    alternate epoch by epoch; the first round (compiling) is left out of the medians.

    ``model`` must be compiled. With ``full_pass_first`` the dataset is read once to
    the end before timing, so a ``cache()`` in it is complete, as in any real epoch
    after the first (a cache read only in part is thrown away). Returns both epoch
    times, their ratio, the share of time spent waiting for input, a verdict, the
    advice that applies, and every epoch's seconds.
    """
    import tensorflow as tf

    if epochs < 2:
        raise ValueError("epochs must be at least 2: the first epoch compiles")
    if full_pass_first:
        for _ in dataset:
            pass
    first = next(iter(dataset))
    in_memory = tf.data.Dataset.from_tensors(first).repeat(steps).cache()
    fed = dataset.repeat().take(steps)
    # alternate the two, epoch by epoch, so a slow spell on a shared machine hits both
    seconds = {"compute": [], "pipeline": []}
    for _ in range(epochs):
        for name, source in (("compute", in_memory), ("pipeline", fed)):
            timer = epoch_timer()
            model.fit(source, epochs=1, verbose=0, callbacks=[timer], shuffle=False)
            seconds[name] += timer.seconds
    return judge(seconds)


def judge(seconds: dict[str, list[float]]) -> dict:
    """The diagnosis from epoch times: ``seconds["compute"]`` and ``seconds["pipeline"]``, one
    figure per epoch, the first of each (compiling) left out of the medians. Kept apart from
    the timing so that it can be checked with given figures."""
    times = {name: statistics.median(values[1:]) for name, values in seconds.items()}
    ratio = times["pipeline"] / times["compute"]
    waiting = max(0.0, 1 - 1 / ratio)
    bound = ratio > THRESHOLD
    verdict = (
        f"Input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one; "
        f"about {waiting:.0%} of the time is spent waiting for data."
        if bound
        else f"Not input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one "
        f"(threshold {THRESHOLD})."
    )
    return {
        "compute_epoch_s": times["compute"],
        "pipeline_epoch_s": times["pipeline"],
        "ratio": ratio,
        "waiting_share": waiting,
        "input_bound": bound,
        "verdict": verdict,
        "advice": ADVICE if bound else [],
        "epoch_seconds": {name: list(values) for name, values in seconds.items()},
    }
