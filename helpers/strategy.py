"""Choose a ``tf.distribute`` strategy: TPU > several GPUs > one GPU > CPU.

The CPU can be split into N logical devices first, so that multi-replica code
(``MirroredStrategy``) runs and is tested without the hardware.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from helpers.devices import TPUStatus, detect_tpu, list_gpus
from helpers.errors import AcceleratorUnavailable, LateConfigurationError, too_late
from helpers.params import ACCELERATORS


@dataclass
class StrategyChoice:
    """The strategy picked, and a sentence saying what it runs on."""

    strategy: object
    kind: str  # "tpu", "gpu" or "cpu"
    replicas: int
    description: str


_MIRRORED: dict = {}


def mirrored(devices: list[str], reduce_to_one: bool = False):
    """One ``MirroredStrategy`` per set of devices for the whole process.

    Several MirroredStrategy objects over the same devices number their all-reduces
    alike, and their collectives were seen to clash (TF 2.21: "Shape mismatch in the
    collective instance"); reusing one object avoids that. Strategies over *overlapping*
    sets (CPU:0-1 and CPU:0-3) clash too ("joining a group with size 4, but that group has
    size 2"): ``reduce_to_one=True`` sums on one device instead of with collectives, so
    several of them can live in one process.
    """
    import tensorflow as tf

    key = (tuple(devices), reduce_to_one)
    if key not in _MIRRORED:
        ops = tf.distribute.ReductionToOneDevice() if reduce_to_one else None
        _MIRRORED[key] = tf.distribute.MirroredStrategy(list(devices), cross_device_ops=ops)
    return _MIRRORED[key]


_TPU: dict = {}


def tpu_strategy(resolver):
    """Connect to and initialise the TPU system once per process, and keep one
    ``TPUStrategy`` over it.

    ``initialize_tpu_system`` wipes the TPU's memory: run a second time (a second "Run all"
    in the same kernel) it would invalidate every variable that already lives there. So the
    first call initialises and later calls for the same TPU reuse that strategy.
    """
    import tensorflow as tf

    try:
        key = resolver.master()
    except Exception:  # a resolver that cannot name its TPU: one per object
        key = id(resolver)
    if key not in _TPU:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        _TPU[key] = tf.distribute.TPUStrategy(resolver)
    return _TPU[key]


def split_cpu(count: int) -> int:
    """Split the CPU into ``count`` logical devices; must run before TF's first op.

    Asking again for the count already in force is fine. Asking for another
    count after TensorFlow has started raises :class:`LateConfigurationError`
    with what to do (restart the kernel), instead of TF's cryptic RuntimeError.
    """
    import tensorflow as tf

    if count < 1:
        raise ValueError(f"count={count} is invalid: a CPU splits into 1 or more devices")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == count:
            return count
        raise LateConfigurationError(
            too_late(f"{count} logical CPU device(s)", f"TensorFlow already started with {have}")
        ) from None
    return count


def available_accelerators(tpu: TPUStatus | None = None, gpus: list | None = None) -> list[str]:
    """The values of ``accelerator`` that this runtime can honour."""
    gpus = list_gpus() if gpus is None else gpus
    tpu = detect_tpu() if tpu is None else tpu
    return ["auto", "cpu"] + (["gpu"] if gpus else []) + (["tpu"] if tpu.usable else [])


def accelerator_rule(tpu: TPUStatus | None = None, gpus: list | None = None):
    """A :mod:`helpers.params` rule: the accelerator asked for must be on this runtime.

    Asking for a TPU where there is none fails in the validation cell, with one
    line saying what this runtime has.
    """
    from helpers.params import accelerator

    return accelerator(lambda: available_accelerators(tpu, gpus))


def choose_strategy(
    accelerator: str = "auto",
    logical_cpus: int = 0,
    tpu: TPUStatus | None = None,
    gpus: list | None = None,
) -> StrategyChoice:
    """Pick the strategy for ``accelerator`` ("auto", "cpu", "gpu" or "tpu").

    "auto" takes the best device present: TPU, then all GPUs (MirroredStrategy),
    then one GPU, then the CPU (MirroredStrategy over ``logical_cpus`` devices
    when that is 2 or more: they stand in for TPU cores or GPUs). Asking for "gpu"
    or "tpu" where there is none raises :class:`AcceleratorUnavailable`: never
    silently run on something else.
    """
    import tensorflow as tf

    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator={accelerator!r} is invalid: use one of {ACCELERATORS}")
    if accelerator in ("auto", "tpu"):
        tpu = detect_tpu() if tpu is None else tpu
        if tpu.usable:
            strategy = tpu_strategy(tpu.resolver)
            n = strategy.num_replicas_in_sync
            return StrategyChoice(strategy, "tpu", n, f"TPU with {n} cores (TPUStrategy)")
        if accelerator == "tpu":
            raise AcceleratorUnavailable(f"accelerator='tpu' but {tpu.message}")
    if accelerator in ("auto", "gpu"):
        gpus = list_gpus() if gpus is None else gpus
        if len(gpus) > 1:
            strategy = mirrored([d.name for d in tf.config.list_logical_devices("GPU")])
            names = ", ".join(g.name for g in gpus)
            return StrategyChoice(
                strategy, "gpu", len(gpus), f"{len(gpus)} GPUs ({names}), MirroredStrategy"
            )
        if gpus:
            strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
            return StrategyChoice(strategy, "gpu", 1, f"GPU {gpus[0].describe()}")
        if accelerator == "gpu":
            raise AcceleratorUnavailable(
                "accelerator='gpu' but TensorFlow sees no GPU on this runtime"
            )
    if logical_cpus >= 2:  # only where no accelerator was taken
        split_cpu(logical_cpus)
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) > 1:
        strategy = mirrored([d.name for d in cpus])
        return StrategyChoice(
            strategy, "cpu", len(cpus), f"CPU split into {len(cpus)} logical devices"
        )
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    return StrategyChoice(strategy, "cpu", 1, f"CPU ({os.cpu_count()} cores)")
