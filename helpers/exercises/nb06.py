"""Checks for notebook 06's exercises (data parallelism), on the notebook's strategy."""

import numpy as np

from helpers.exercises import exercise, require


@exercise("06.1", "run the loss on every replica and reduce it",
          hint="Each replica's share must be its losses' sum divided by the GLOBAL batch size "
               "(what notebook 04's `bce` asks `tf.nn.compute_average_loss` for), so that the "
               "shares add up to the mean; which `ReduceOp` adds them?",
          right="`strategy.run` computed each replica's share of the loss and `strategy.reduce` "
                "summed them into the global batch's mean, on this notebook's replicas, with a "
                "full batch and a short last one: the number notebook 04's distributed step "
                "reports.")
def global_loss(fn, strategy) -> str | None:
    import tensorflow as tf

    if (replicas := strategy.num_replicas_in_sync) < 2:  # one replica's mean is the global one
        return "This check needs 2 or more replicas (logical_devices=2 or more) to judge it."

    def per_example(values):  # the per-example loss the check's model stands for
        return tf.square(tf.cast(values, tf.float32))

    values = np.random.default_rng(5).uniform(0.5, 2.0, 8 * replicas).astype("float32")
    # a full batch, then a short last one that splits unevenly (some replicas get none), even on 2
    for size in (len(values), replicas + 1):
        batch = values[:size]
        dataset = tf.data.Dataset.from_tensor_slices(batch).batch(size)
        dist_batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        got = fn(strategy, per_example, dist_batch, size)
        require(got)
        if type(got).__name__ == "PerReplica" or isinstance(got, list | tuple):
            return ("It returned one value per replica: `strategy.reduce` them into one "
                    "number (ReduceOp.SUM, axis=None).")
        try:
            total = float(got)
        except (TypeError, ValueError):
            return f"It returned a {type(got).__name__}, not one number."
        want = float(np.mean(np.square(batch)))
        if not np.isfinite(total):
            return (f"On {replicas} replicas and a batch of {size}, it gave {total}: a replica "
                    "whose share of the short batch is empty divided by zero. Average over the "
                    "global batch size, not over the share.")
        if not np.isclose(total, want, rtol=1e-4):
            ratio, why = total / want, ""
            if np.isclose(ratio, replicas, rtol=1e-3):
                why = (" That is each replica's own mean, summed: average over the GLOBAL "
                       "batch instead.")
            elif np.isclose(ratio, 1 / replicas, rtol=1e-3):
                why = (" That is the global share averaged once more over the replicas: reduce "
                       "with ReduceOp.SUM.")
            return (f"On {replicas} replicas and a batch of {size}, it gave {total:.5g}, not the "
                    f"global batch's mean loss {want:.5g} ({ratio:.3g} times it).{why}")
    return None


@exercise("06.2", "write the input function that shards by InputContext",
          hint="Read the input context as `tfrecord_input_fn` does: which of its fields say how "
               "many pipelines there are and which one this is, and which gives the per-replica "
               "batch size? Shard the examples, not the replicas, and keep full batches only.",
          right="Every input pipeline read its own share of the examples, each example exactly "
                "once, in full batches of the per-replica size: what "
                "`distribute_datasets_from_function` expects from each machine.")
def array_input_fn(make) -> str | None:
    import tensorflow as tf

    count = 100  # no share divides into whole batches, whatever the global batch: full ones only
    x = np.arange(count, dtype="float32")[:, None] * np.ones((1, 3), "float32")
    for global_batch, pipelines, replicas in ((24, 1, 1), (24, 1, 4), (24, 2, 4), (24, 4, 8),
                                              (24, 3, 3), (48, 1, 1), (48, 2, 4), (48, 3, 3)):
        input_fn = make(x, np.arange(count, dtype="int64"), global_batch)
        require(input_fn)
        if not callable(input_fn):
            return (f"It returned a {type(input_fn).__name__}: return the input function itself, "
                    "`input_fn(context)`, for `distribute_datasets_from_function` to call.")
        per_replica = global_batch // replicas
        where = f"{pipelines} input pipeline(s) feeding {replicas} replicas"
        seen = []
        for pipeline in range(pipelines):
            dataset = input_fn(tf.distribute.InputContext(
                num_input_pipelines=pipelines, input_pipeline_id=pipeline,
                num_replicas_in_sync=replicas))
            require(dataset)
            if not isinstance(dataset, tf.data.Dataset):
                return f"With {where}, input_fn returned a {type(dataset).__name__}, not a Dataset."
            batches = list(dataset.take(count // pipelines // per_replica + 2))  # never a repeat()
            for number, element in enumerate(batches, start=1):
                if not isinstance(element, tuple) or len(element) != 2:
                    return f"With {where}, an element is not a pair (images, labels)."
                images, labels = element
                if (size := int(labels.shape[0])) < per_replica and number == len(batches) > 1:
                    return (f"With {where}, a batch holds {size} examples, the remainder of the "
                            "share: keep full batches only (`drop_remainder=True`), so that every "
                            "step has the same shape.")
                if size != per_replica:
                    return (f"With {where}, a batch holds {size} examples, not the per-replica "
                            f"size {per_replica} (the global batch {global_batch} over "
                            f"{replicas} replicas).")
                if not np.array_equal(images.numpy()[:, 0], labels.numpy()):
                    return f"With {where}, the images and labels of a batch do not match."
                seen += [int(v) for v in labels.numpy()]
        if twice := sorted({v for v in seen if seen.count(v) > 1}):
            return (f"With {where}, example {twice[0]} is read more than once ({len(twice)} such): "
                    "each pipeline must read only its share (`shard` by `num_input_pipelines` and "
                    "`input_pipeline_id`), once (no `repeat`); a `shuffle` before the `shard` also "
                    "does it, as each pipeline shuffles differently: shard first.")
        missed = sorted(set(range(count)) - set(seen))
        if len(missed) > pipelines * (per_replica - 1):  # more than each share's remainder
            return (f"With {where}, {len(missed)} of the {count} examples are never read "
                    f"(example {missed[0]}, for one): shard by the number of input pipelines, "
                    "not of replicas.")
    return None
