"""Time code correctly: warm-up kept apart, a device sync before each clock stop,
repeats, and the median with its spread.

Accelerators run asynchronously: a call returns when the work is queued, not
done. The first call of a ``tf.function`` also traces and compiles. Timing one
first call without a sync (what many posts do) measures neither the compute
nor its steady state. Notebook 02 writes the technique out in its own cells, next to
the naive way and ``timeit``; this module is the same technique as the harness the rest
of the course uses.
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
