"""The course's timing harness: first call apart, warm-up, a device sync before each clock stop."""

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


def device_sync() -> None:  # wait for all queued TensorFlow device work
    import tensorflow as tf

    tf.test.experimental.sync_devices()


def no_sync() -> None:
    """For work that is synchronous already (NumPy, Python)."""


@dataclass
class Timing:  # seconds of the first call and of each later sample; work: units per call
    first_call_s: float
    samples_s: list[float]
    work: float | None = None

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

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
    return float(statistics.median(seconds[warmup:] or seconds[-1:]))


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
