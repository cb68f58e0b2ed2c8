"""Time code correctly: warm-up kept apart, a device sync before each clock stop,
repeats, and the median with its spread.

Accelerators run asynchronously: a call returns when the work is queued, not
done. The first call of a ``tf.function`` also traces and compiles. Timing one
first call without a sync (what many posts do) measures neither the compute
nor its steady state. Notebook 02 writes the technique out in its own cells, next to
the naive way and ``timeit``; this module is the same technique as the harness the rest
of the course uses, and the epoch clock of ``model.fit`` (:func:`epoch_timer`): the first
epoch traces and compiles, so it is reported apart; the steady state is the median of the
later epochs (Keras reads the loss back at each epoch's end, so the clock includes the
device's work).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np


def device_sync() -> None:
    """Wait for all queued TensorFlow device work (``tf.test.experimental.sync_devices``)."""
    import tensorflow as tf

    tf.test.experimental.sync_devices()


def no_sync() -> None:
    """For work that is synchronous already (NumPy, Python)."""


@dataclass
class Timing:
    """Seconds per call for one piece of work, with where and how it ran."""

    name: str
    device: str
    dtype: str | None
    first_call_s: float
    samples_s: list[float]
    warmup: int
    synced: bool
    work: float | None = None  # units of work in one call (FLOPs, images, ...)
    work_unit: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def q1_s(self) -> float:
        return float(np.percentile(self.samples_s, 25))

    @property
    def q3_s(self) -> float:
        return float(np.percentile(self.samples_s, 75))

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    @property
    def rate(self) -> float | None:
        """Work per second at the median time (e.g. FLOP/s, images/s)."""
        return self.work / self.median_s if self.work and self.median_s > 0 else None

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(median_s=self.median_s, iqr_s=self.iqr_s, rate=self.rate)
        return out

    def __str__(self) -> str:
        rate = f", {self.rate:.4g} {self.work_unit}/s" if self.rate else ""
        return (
            f"{self.name} on {self.device}: median {self.median_s * 1e3:.3f} ms "
            f"(IQR {self.iqr_s * 1e3:.3f} ms, {len(self.samples_s)} repeats){rate}; "
            f"first call {self.first_call_s * 1e3:.1f} ms"
        )


def measure(
    fn: Callable[[], object],
    *,
    name: str = "",
    device: str = "",
    dtype: str | None = None,
    warmup: int = 2,
    repeats: int = 10,
    number: int = 1,
    sync: Callable[[], None] = device_sync,
    clock: Callable[[], float] = time.perf_counter,
    work: float | None = None,
    work_unit: str = "",
) -> Timing:
    """Time ``fn`` properly.

    The first call (tracing, compiling, allocating) is timed on its own and kept
    out of the statistics; ``warmup - 1`` more calls run untimed; then each of
    ``repeats`` samples times ``number`` calls followed by ``sync()``, so the
    clock stops only when the device has finished. Returns seconds per call.
    """
    if warmup < 1 or repeats < 1 or number < 1:
        raise ValueError("warmup, repeats and number must each be at least 1")
    start = clock()
    fn()
    sync()
    first = clock() - start
    for _ in range(warmup - 1):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = clock()
        for _ in range(number):
            fn()
        sync()
        samples.append((clock() - start) / number)
    return Timing(
        name=name,
        device=device,
        dtype=dtype,
        first_call_s=first,
        samples_s=samples,
        warmup=warmup,
        synced=sync is not no_sync,
        work=work,
        work_unit=work_unit,
    )


def steady_state(seconds, warmup: int = 1) -> float:
    """The course's one steady-state measure: the median of the runs after the first
    ``warmup`` (which trace, compile or fill caches); with no run after them, the last one."""
    seconds = list(seconds)
    if not seconds:
        raise ValueError("no timings to take a steady state of")
    later = seconds[warmup:]
    return float(statistics.median(later)) if later else float(seconds[-1])


def epoch_result(
    seconds: list[float],
    images: int,
    *,
    label: str,
    kind: str,
    device: str,
    batch_size: int,
    policy: str = "float32",
    xla: bool = False,
) -> dict:
    """One training run's result from its epochs' seconds (:func:`epoch_timer`).

    The first epoch (tracing, compiling) is kept apart; the steady state is the median of the
    later ones, and images/s is ``images`` per steady-state epoch.
    """
    if len(seconds) < 2:
        raise ValueError(f"got {len(seconds)} epoch time(s); need at least 2: the first compiles")
    steady = steady_state(seconds)
    return {
        "label": label,
        "kind": kind,
        "device": device,
        "batch_size": batch_size,
        "policy": policy,
        "xla": xla,
        "first_epoch_s": seconds[0],
        "epoch_s": steady,
        "images_per_s": images / steady,
        "images": images,
        "epochs": len(seconds),
    }


def _epoch_timer_class():
    import keras

    class _EpochTimer(keras.callbacks.Callback):
        """Wall-clock seconds of each epoch."""

        def __init__(self, project: str = ""):
            super().__init__()
            self.seconds = []
            self.project = project

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)
            total = (self.params or {}).get("epochs")
            if self.project and len(self.seconds) == 2 and (total or 0) > 2:
                print(projection(self.project, self.seconds, total))

    return _EpochTimer


def projection(what: str, seconds: list[float], total: int) -> str:
    """One line, after the first epochs: how long the rest of ``total`` will take at the pace
    of the last one measured (the first, which compiles, is said apart)."""
    pace, left = seconds[-1], total - len(seconds)
    return (f"{what}: epoch 1 took {seconds[0]:.1f} s (compiling), epoch {len(seconds)} "
            f"{pace:.1f} s; the {left} epoch{'s' * (left != 1)} left will take about "
            f"{left * pace:.0f} s at that pace.")


def epoch_timer(project: str = ""):
    """A Keras callback recording each epoch's wall-clock seconds in ``.seconds``. With
    ``project`` (what is trained), it prints after the second epoch how long the rest of
    ``fit``'s epochs will take (:func:`projection`), so a learner can stop and choose less."""
    return _epoch_timer_class()(project)


def speedup(fast: dict, slow: dict) -> float:
    """How many times more images/s ``fast`` trained than ``slow``."""
    return fast["images_per_s"] / slow["images_per_s"]


RESULT_HEADERS = ["run", "device", "images/epoch", "batch", "policy", "XLA", "first epoch s",
                  "epoch s", "images/s"]


def result_rows(results: list[dict]) -> list[list]:
    return [
        [
            r["label"],
            r["device"],
            r["images"],
            r["batch_size"],
            r["policy"],
            "on" if r["xla"] else "off",
            f"{r['first_epoch_s']:.2f}",
            f"{r['epoch_s']:.3f}",
            f"{r['images_per_s']:.0f}",
        ]
        for r in results
    ]


def plot_batch_sweep(results: list[dict], title: str = "Throughput vs batch size"):
    """images/s against batch size (log scale)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    results = sorted(results, key=lambda r: r["batch_size"])
    ax.plot([r["batch_size"] for r in results], [r["images_per_s"] for r in results], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("images/s (steady state)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def speedup_lines(results: list[dict]) -> list[str]:
    """What the measurements say: each accelerator's speedup over the CPU on the same model
    (runs paired by ``label``), or why there is none."""
    cpus = {r["label"]: r for r in results if r["kind"] == "cpu"}
    pairs = [(r, cpus[r["label"]]) for r in results if r["kind"] != "cpu" and r["label"] in cpus]
    if not pairs:
        return [
            "CPU only: no speedup can be measured on this runtime. In Colab, choose "
            "Runtime > Change runtime type > T4 GPU and run the notebook again."
        ]
    return [
        f"{r['label']}: {r['device']} trained {speedup(r, cpu):.1f}x the images/s of the CPU "
        f"({r['images_per_s']:.0f} vs {cpu['images_per_s']:.0f}, measured in this run)."
        for r, cpu in pairs
    ]


def knob_lines(runs: list[dict]) -> list[str]:
    """Each knob's effect as a ratio of images/s to the first run (the float32 baseline)."""
    base, lines = runs[0], []
    for run in runs[1:]:
        ratio = speedup(run, base)
        verdict = "faster" if ratio > 1.05 else "slower" if ratio < 0.95 else "about the same"
        lines.append(f"{run['label']}: {ratio:.2f}x the float32 images/s ({verdict}).")
    return lines
