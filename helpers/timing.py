"""The course's timing harness: :func:`measure` (first call apart, warm-up, a device sync before
each clock stop, median and spread), :func:`steady_state`, and ``fit``'s epoch clock and tables."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RESULT_HEADERS = ["run", "device", "images/epoch", "batch", "policy", "XLA", "first epoch s",
                  "epoch s", "images/s"]


def device_sync() -> None:  # wait for all queued TensorFlow device work
    import tensorflow as tf

    tf.test.experimental.sync_devices()


def no_sync() -> None:
    """For work that is synchronous already (NumPy, Python)."""


@dataclass
class Timing:
    """Seconds of the first call and of each later sample; ``work``: units of work per call."""

    first_call_s: float
    samples_s: list[float]
    work: float | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def iqr_s(self) -> float:
        q1, q3 = np.percentile(self.samples_s, [25, 75])
        return float(q3 - q1)

    @property
    def rate(self) -> float | None:  # work per second at the median time (FLOP/s, images/s)
        return self.work / self.median_s if self.work and self.median_s > 0 else None


def measure(fn: Callable[[], object], *, warmup: int = 2, repeats: int = 10,
            sync: Callable[[], None] = device_sync, clock: Callable[[], float] = time.perf_counter,
            work: float | None = None) -> Timing:
    """Time ``fn``: first call apart, ``warmup - 1`` untimed, then ``repeats`` synced samples."""
    if warmup < 1 or repeats < 1:
        raise ValueError("warmup and repeats must each be at least 1")

    def timed() -> float:
        start = clock()
        fn()
        sync()
        return clock() - start

    first = timed()
    for _ in range(warmup - 1):
        fn()
    sync()
    return Timing(first, [timed() for _ in range(repeats)], work)


def steady_state(seconds, warmup: int = 1) -> float:
    """The median of the runs after the first ``warmup`` ones, or else the last run."""
    seconds = list(seconds)
    if not seconds:
        raise ValueError("no timings to take a steady state of")
    later = seconds[warmup:]
    return float(statistics.median(later)) if later else float(seconds[-1])


def epoch_result(seconds: list[float], images: int, *, label: str, kind: str, device: str,
                 batch_size: int, policy: str = "float32", xla: bool = False) -> dict:
    """One run's result: the first epoch (compiling) apart, images/s at the steady state."""
    if len(seconds) < 2:
        raise ValueError(f"got {len(seconds)} epoch time(s); need at least 2: the first compiles")
    steady = steady_state(seconds)
    return {"label": label, "kind": kind, "device": device, "batch_size": batch_size,
            "policy": policy, "xla": xla, "first_epoch_s": seconds[0], "epoch_s": steady,
            "images_per_s": images / steady, "images": images, "epochs": len(seconds)}


def projection(what: str, seconds: list[float], total: int) -> str:
    """One line: how long the rest of ``total`` epochs will take at the last one's pace."""
    pace, left = seconds[-1], total - len(seconds)
    return (f"{what}: epoch 1 took {seconds[0]:.1f} s (compiling), epoch {len(seconds)} "
            f"{pace:.1f} s; the {left} epoch{'s' * (left != 1)} left will take about "
            f"{left * pace:.0f} s at that pace.")


def epoch_timer(project: str = ""):
    """A Keras callback: each epoch's seconds in ``.seconds``; with ``project``, the time left."""
    import keras

    class EpochTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)
            total = (self.params or {}).get("epochs") or 0
            if project and len(self.seconds) == 2 and total > 2:
                print(projection(project, self.seconds, total))

    return EpochTimer()


def result_rows(results: list[dict]) -> list[list]:
    return [[r["label"], r["device"], r["images"], r["batch_size"], r["policy"],
             "on" if r["xla"] else "off", f"{r['first_epoch_s']:.2f}", f"{r['epoch_s']:.3f}",
             f"{r['images_per_s']:.0f}"] for r in results]


def plot_batch_sweep(results: list[dict], title: str = "Throughput vs batch size"):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    results = sorted(results, key=lambda r: r["batch_size"])
    ax.plot([r["batch_size"] for r in results], [r["images_per_s"] for r in results], marker="o")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="batch size", ylabel="images/s (steady state)", title=title)
    fig.tight_layout()
    return fig


def speedup_lines(results: list[dict]) -> list[str]:
    """Each accelerator's speedup over the CPU on the same model (by ``label``), or why none."""
    cpus = {r["label"]: r for r in results if r["kind"] == "cpu"}
    pairs = [(r, cpus[r["label"]]) for r in results if r["kind"] != "cpu" and r["label"] in cpus]
    if not pairs:
        return ["CPU only: no speedup can be measured on this runtime. In Colab, choose "
                "Runtime > Change runtime type > T4 GPU and run the notebook again."]
    return [f"{r['label']}: {r['device']} trained {r['images_per_s'] / cpu['images_per_s']:.1f}x "
            f"the images/s of the CPU ({r['images_per_s']:.0f} vs {cpu['images_per_s']:.0f}, "
            "measured in this run)." for r, cpu in pairs]


def knob_lines(runs: list[dict]) -> list[str]:
    """Each knob's effect as a ratio of images/s to the first run (the float32 baseline)."""
    base, lines = runs[0], []
    for run in runs[1:]:
        ratio = run["images_per_s"] / base["images_per_s"]
        verdict = "faster" if ratio > 1.05 else "slower" if ratio < 0.95 else "about the same"
        lines.append(f"{run['label']}: {ratio:.2f}x the float32 images/s ({verdict}).")
    return lines
