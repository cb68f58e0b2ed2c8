"""Plumbing of notebook 05 (data parallel), reused by 07, 08 and 09: 1-versus-N comparisons, the
batch rule and the classifier runs.

Training under ``tf.distribute``: global vs per-replica batches, input sharding,
and the proof that 1 replica and N replicas compute the same update.

On a CPU split into logical devices (``helpers.devices.split_cpu``) all of it runs
with ``MirroredStrategy``, so TPU code paths are exercised without a TPU.
"""

from __future__ import annotations

import numpy as np

from helpers.devices import accelerator_rule, precision
from helpers.devices import mirrored as shared_mirrored
from helpers.errors import invalid
from helpers.models import replica_classifier
from helpers.params import all_of, enough_images, folder, integer, one_of, validate
from helpers.timing import epoch_timer, steady_state


def expected_replicas(accelerator: object, logical_devices: object, gpus: int, tpu_usable: bool):
    """How many replicas notebook 05's strategy cell will make, from the raw parameters, for its
    validation cell: every GPU where there are several, else the logical CPU devices; None on
    a TPU (its core count is known once connected, and checked then)."""
    if tpu_usable and accelerator in ("auto", "tpu"):
        return None
    if gpus > 1 and accelerator in ("auto", "gpu"):
        return gpus
    valid = isinstance(logical_devices, int) and not isinstance(logical_devices, bool)
    return logical_devices if valid and 1 <= logical_devices <= 64 else 1


def batch_rule(replicas: int | None):
    """A :mod:`helpers.params` rule: the global batch must split evenly across replicas (any
    positive integer where ``replicas`` is None: not known yet)."""
    if replicas is None:
        return integer(1, 10_000_000)

    def rule(name: str, value: object) -> object:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < replicas
            or value % replicas
        ):
            raise invalid(name, value, "the global batch must be a positive multiple of the "
                          f"{replicas} replicas (e.g. {replicas * 16})")
        return value

    return rule


def in_memory_dataset(x, y, global_batch: int, shuffle: bool = True, seed: int = 0):
    """Arrays as a dataset of full global batches, sharded by data (not by file).

    ``drop_remainder`` keeps every replica's batch the same static size (a TPU needs it).
    """
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=seed)
    ds = ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def compile_classifier(model, steps_per_execution: int = 1):
    import keras

    # SGD at 0.1 sent the first epoch's loss to 10-14 here before it recovered; this descends
    model.compile(
        optimizer=keras.optimizers.SGD(0.005, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model


def classifier_step_results(strategies: dict, x, y, synchronized: bool = True) -> dict:
    """One ``fit`` step on the same global batch under each strategy, from the same weights.

    Returns, per strategy name, the loss and the updated weights."""
    import keras

    results, start = {}, None
    for name, strategy in strategies.items():
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = compile_classifier(replica_classifier(x.shape[1:], synchronized=synchronized))
        if start is None:
            start = model.get_weights()
        model.set_weights(start)
        history = model.fit(
            in_memory_dataset(x, y, len(x), shuffle=False), epochs=1, verbose=0, shuffle=False
        )
        results[name] = {"loss": history.history["loss"][-1], "weights": model.get_weights()}
    return results


def largest_difference(results: dict, reference: str) -> dict:
    """Per strategy (or device count): the largest absolute difference in loss and in any
    updated weight from ``reference``'s. Where the results carry their ``start`` weights,
    also ``update``: the norm of the difference between the two updates over the norm of
    ``reference``'s update."""
    base = results[reference]
    out = {}
    for name, result in results.items():
        if name == reference:
            continue
        losses = np.atleast_1d(result["loss"]) - np.atleast_1d(base["loss"])
        weights = max(
            float(np.max(np.abs(a - b)))
            for a, b in zip(result["weights"], base["weights"], strict=True)
        )
        out[name] = {"loss": float(np.max(np.abs(losses))), "weights": weights}
        if "start" in result and "start" in base:
            ours = _flat(result["weights"]) - _flat(result["start"])
            theirs = _flat(base["weights"]) - _flat(base["start"])
            out[name]["update"] = float(
                np.linalg.norm(ours - theirs) / max(np.linalg.norm(theirs), 1e-30)
            )
    return out


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype="float64").ravel() for a in arrays])


def mirrored(count: int):
    """MirroredStrategy over the first ``count`` logical CPUs, one object per device set
    (a OneDeviceStrategy for 1)."""
    import tensorflow as tf

    cpus = [d.name for d in tf.config.list_logical_devices("CPU")][:count]
    if len(cpus) < count:
        raise ValueError(f"only {len(cpus)} logical CPUs; split the CPU first")
    if count == 1:
        return tf.distribute.OneDeviceStrategy(cpus[0])
    return shared_mirrored(cpus)


def fit_classifier(
    strategy,
    x,
    y,
    global_batch: int,
    epochs: int = 2,
    steps_per_execution: int = 1,
    policy: str | None = None,
    synchronized: bool = True,
) -> dict:
    """Train the classifier with ``fit`` under ``strategy``: the global batch split across
    replicas, ``steps_per_execution`` steps per call, an optional mixed policy (batch norm
    and the loss stay float32). Returns loss per epoch and steady-state images/s.

    ``synchronized=False``: per-replica batch norm. Synchronized batch norm uses collective
    ops whose keys clash between MirroredStrategy objects over overlapping device sets."""

    import tensorflow as tf

    note = ""
    if isinstance(strategy, tf.distribute.MirroredStrategy) and steps_per_execution > 1:
        # Keras 3.15 + TF 2.21: fit with steps_per_execution > 1 under MirroredStrategy fails
        # ("You must feed a value for placeholder tensor", keras-team/keras#19246)
        note = (
            f"steps_per_execution={steps_per_execution} fails under MirroredStrategy in "
            "this Keras (keras-team/keras#19246); using 1 here. TPUStrategy takes it."
        )
        steps_per_execution = 1
    with precision(policy), strategy.scope():
        model = compile_classifier(
            replica_classifier(x.shape[1:], synchronized=synchronized), steps_per_execution
        )
    timer = epoch_timer()
    # one dataset repeated, steps_per_epoch given: Keras keeps one iterator for the whole fit.
    # A finite dataset gets a new distributed iterator each epoch, and releasing the old one
    # took 0.5-8 s on 8 logical CPU replicas, inside the next epoch's time.
    history = model.fit(
        in_memory_dataset(x, y, global_batch).repeat(),
        epochs=epochs,
        steps_per_epoch=len(x) // global_batch,
        verbose=0,
        callbacks=[timer],
        shuffle=False,
    )
    steady = steady_state(timer.seconds)
    images = (len(x) // global_batch) * global_batch
    return {
        "loss": history.history["loss"],
        "images_per_s": images / steady,
        "replicas": strategy.num_replicas_in_sync,
        "policy": policy or "float32",
        "steps_per_execution": steps_per_execution,
        "note": note,
    }


def tpu_batch_advice(kind: str, global_batch: int, replicas: int) -> str:
    """TPU cores multiply 128x128 tiles: per-core batches that are multiples of 128 fill them."""
    per_replica = global_batch // replicas
    if per_replica % 128 == 0:
        return f"{per_replica} images per replica: a multiple of 128, as TPU cores like."
    where = "on a TPU" if kind == "tpu" else "on a real TPU"
    return (
        f"{per_replica} images per replica; {where}, prefer a multiple of 128 per core "
        f"(a global batch of {128 * replicas} or more)."
    )


def check_parameters(*, tpu, accelerator, logical_devices, global_batch_size, epochs,
                     steps_per_execution, steps_per_call, max_images, use_bfloat16, work_dir):
    """Notebook 05's parameters, checked before any work: one line names a wrong one. ``tpu``:
    what :func:`helpers.devices.detect_tpu` found."""
    import tensorflow as tf

    replicas = expected_replicas(accelerator, logical_devices,
                                 len(tf.config.list_physical_devices("GPU")), tpu.usable)
    return validate(
        accelerator=(accelerator, accelerator_rule(tpu)),
        logical_devices=(logical_devices, integer(1, 64)),
        global_batch_size=(global_batch_size, batch_rule(replicas)),
        epochs=(epochs, integer(2, 1000)),
        steps_per_execution=(steps_per_execution, integer(1, 10_000)),
        steps_per_call=(steps_per_call, integer(1, 10_000)),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(global_batch_size, batches=1))),
        use_bfloat16=(use_bfloat16, one_of("auto", True, False)),
        work_dir=(work_dir, folder()),
    )


def check_batch(global_batch_size, replicas: int):
    """Notebook 05's ``global_batch_size`` checked again, against the replicas its strategy
    has: one line if they do not divide it."""
    return validate(echo=False, global_batch_size=(global_batch_size, batch_rule(replicas)))
