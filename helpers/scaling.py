"""Throughput against the number of replicas, with ``MirroredStrategy`` on one machine.

Real GPUs where there are several; one GPU split into logical GPUs; or the CPU split into
logical devices. Split devices share the same hardware, so they show the cost of replication
(copies, all-reduces), not a speedup: the notebook says which case ran.
"""

from __future__ import annotations

import dataclasses

from helpers.errors import LateConfigurationError, too_late
from helpers.strategy import split_cpu


@dataclasses.dataclass
class ReplicaDevices:
    kind: str  # "gpu" or "cpu"
    names: list[str]
    description: str
    shared_hardware: bool  # True where the devices are slices of one chip


def replica_counts(largest: int) -> list[int]:
    """1, 2, 4, ... up to ``largest`` (which is included)."""
    counts, n = [], 1
    while n < largest:
        counts.append(n)
        n *= 2
    return counts + [largest]


def replica_devices(count: int, gpu_memory_mb: int | None = None) -> ReplicaDevices:
    """Devices for up to ``count`` replicas; must run before TensorFlow's first op.

    Several GPUs: all of them. One GPU: split into ``count`` logical GPUs of
    ``gpu_memory_mb`` each (default: 80% of the GPU's memory shared out, at most 2 GiB each).
    No GPU: the CPU split into ``count`` logical devices."""
    import tensorflow as tf

    from helpers.devices import list_gpus

    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) == 1 and gpu_memory_mb is None:
        total = list_gpus()[0].memory_mib or 8192  # nvidia-smi's figure, where it answers
        gpu_memory_mb = min(2048, int(0.8 * total / count))
    if len(gpus) > 1:
        for gpu in gpus:  # take only what training needs: local workers want GPUs later
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:  # TensorFlow already started its GPUs: keep what is set
                pass
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        return ReplicaDevices("gpu", names, f"{len(names)} GPUs", False)
    if gpus:
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb)] * count
        try:
            tf.config.set_logical_device_configuration(gpus[0], config)
        except RuntimeError:
            have = len(tf.config.list_logical_devices("GPU"))
            if have != count:
                raise LateConfigurationError(
                    too_late(f"{count} logical GPUs", f"TensorFlow already started with {have}")
                ) from None
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        return ReplicaDevices(
            "gpu", names, f"GPU split into {count} logical GPUs of {gpu_memory_mb} MB", True
        )
    split_cpu(count)
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    return ReplicaDevices("cpu", names, f"CPU split into {count} logical devices", True)


def sweep(
    strategy_for, counts, x, y, per_replica_batch: int, epochs: int = 3, progress=None
) -> list[dict]:
    """Train the classifier of notebook 05 with ``fit`` under ``strategy_for(count)`` (notebook
    07 shows the ``MirroredStrategy`` it builds) on each replica count, keeping the batch per
    replica fixed (the global batch grows with the replicas, as when GPUs are added).

    Returns one row per count: images/s (median of the epochs after the first), speedup over
    one replica, and scaling efficiency (speedup / replicas)."""
    from helpers.distribute import fit_classifier

    rows = []
    for count in counts:
        run = fit_classifier(
            strategy_for(count),
            x,
            y,
            per_replica_batch * count,
            epochs=epochs,
            synchronized=False,  # as most training runs; see fit_classifier
        )
        rows.append(
            {
                "replicas": count,
                "global_batch": per_replica_batch * count,
                "images_per_s": run["images_per_s"],
            }
        )
        if progress:
            progress(rows[-1])
    first = rows[0]
    for row in rows:
        row["speedup"] = row["images_per_s"] / first["images_per_s"]
        row["efficiency"] = row["speedup"] / (row["replicas"] / first["replicas"])
    return rows


def plot(rows: list[dict], description: str):
    """Images/s against replicas, beside perfect linear scaling from the first point."""
    import matplotlib.pyplot as plt

    counts = [r["replicas"] for r in rows]
    measured = [r["images_per_s"] for r in rows]
    ideal = [measured[0] * c / counts[0] for c in counts]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(counts, measured, "o-", label="measured")
    ax.plot(counts, ideal, "--", color="gray", label="perfect scaling")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_xlabel("replicas")
    ax.set_ylabel("training images/s")
    ax.set_title(f"MirroredStrategy on {description}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig
