"""Checks for notebook 05's exercises (data parallelism: the loss average, the input shards).

They need neither TensorFlow nor JAX (the notebook runs where only one of them is installed):
numpy inputs stand in for each replica's share of a global batch.
"""

from __future__ import annotations

import numpy as np

from helpers.exercises import exercise, require


def _shards(values, sizes):
    bounds, start = [], 0
    for size in sizes:
        bounds.append(values[start:start + size])
        start += size
    return bounds


@exercise("05.1", "average the loss over the global batch",
          hint="Sum this replica's per-example losses and divide by the GLOBAL batch size "
               "(what `tf.nn.compute_average_loss` does): the replicas' gradients are then "
               "summed, so each must carry its share of the global mean, not its own mean.",
          right="Summed over the replicas, as the gradient all-reduce sums them, the losses make "
                "the global batch's mean on 1, 4 or 8 replicas, even with a short last batch.")
def replica_loss(fn) -> str | None:
    losses = np.random.default_rng(5).uniform(0.1, 3.0, 64).astype("float32")
    cases = [("1 replica", [64], 64), ("4 replicas", [16] * 4, 64), ("8 replicas", [8] * 8, 64),
             ("4 replicas sharing a short last batch of 10 (3, 3, 2 and 2 examples)",
              [3, 3, 2, 2], 10)]
    for name, sizes, global_batch in cases:
        batch = losses[:sum(sizes)]
        shares = [fn(shard, global_batch) for shard in _shards(batch, sizes)]
        require(*shares)
        total, mean = float(np.sum([float(s) for s in shares])), float(np.mean(batch))
        if not np.isclose(total, mean, rtol=1e-5):
            factor = total / mean
            why = (" That is each replica's own mean: the sum over the replicas is then "
                   "the replica count times too large." if np.isclose(factor, len(sizes))
                   else "")
            return (f"On {name}, the replicas' losses sum to {total:.4g}, not the global "
                    f"batch's mean {mean:.4g} ({factor:.3g} times it).{why}")
    return None


@exercise("05.2", "give each input pipeline its share of the files",
          hint="Pipeline `i` of `n` takes every n-th file starting at the i-th, as "
               "`files.shard(n, i)` does: `files[pipeline_id::num_pipelines]`.",
          right="Every file is read by exactly one pipeline, the shares differ by at most one "
                "file, and each is the one `Dataset.shard` would give.")
def pipeline_files(fn) -> str | None:
    cases = [(count, pipelines, [f"train-{i:02d}-of-{count:02d}.tfrecord" for i in range(count)])
             for count, pipelines in ((8, 1), (8, 2), (10, 4), (9, 4))]
    answers = []
    for count, pipelines, files in cases:
        shares = [fn(list(files), pipelines, i) for i in range(pipelines)]
        require(*shares)
        shares = [list(s) for s in shares]
        answers.append(shares)
        read = [f for share in shares for f in share]
        where = f"{count} files over {pipelines} pipeline(s)"
        missed = [f for f in files if f not in read]
        if missed:
            return f"With {where}, no pipeline reads {missed[0]} ({len(missed)} missed)."
        twice = sorted({f for f in read if read.count(f) > 1})
        if twice:
            return f"With {where}, {twice[0]} is read by more than one pipeline."
        if set(read) - set(files):
            return f"With {where}, a pipeline reads something not in the list it was given."
        sizes = [len(s) for s in shares]
        if max(sizes) - min(sizes) > 1:
            return (f"With {where}, the pipelines get {sizes} files: an uneven split leaves "
                    "some devices waiting for the others.")
    for (count, pipelines, files), shares in zip(cases, answers, strict=True):
        if shares != [files[i::pipelines] for i in range(pipelines)]:
            return (f"With {count} files over {pipelines} pipelines, each gets its number of "
                    "files, but not the ones `shard(n, i)` keeps: every n-th file, starting at "
                    "the i-th.")
    return None
