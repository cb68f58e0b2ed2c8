"""The tf.data latency benchmark: where an input pipeline's time goes, and what each
optimisation buys.

A synthetic data source pays simulated latencies like real storage does: opening
a file, reading each record, decoding (``map``) and a training step, each a
``time.sleep`` so the numbers do not depend on the CPU. Each variant adds one
optimisation to the naive pipeline, then all are combined. Every event is
logged with its start and end, so a timeline shows what overlaps.
This module is the harness (simulated files and decoding, timing, timelines); the
transformations compared are the notebook's own (``helpers.lessons.tfdata_pipelines``).
The idea is TF's data-performance guide's; the code is ours.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Latencies:
    """Simulated costs in seconds; ``scale`` shrinks them all (tests use a small scale)."""

    open_s: float = 0.030
    read_s: float = 0.015
    map_s: float = 0.010
    train_s: float = 0.010
    files: int = 4
    records_per_file: int = 6
    batch_size: int = 2

    def scaled(self, scale: float) -> Latencies:
        return Latencies(
            self.open_s * scale,
            self.read_s * scale,
            self.map_s * scale,
            self.train_s * scale,
            self.files,
            self.records_per_file,
            self.batch_size,
        )


class EventLog:
    """Thread-safe list of (kind, start, end) events, relative to the log's start."""

    def __init__(self):
        self.events: list[tuple[str, float, float]] = []
        self._lock = threading.Lock()
        self.origin = time.perf_counter()

    def record(self, kind: str, start: float, end: float) -> None:
        with self._lock:
            self.events.append((kind, start - self.origin, end - self.origin))

    def timed_sleep(self, kind: str, seconds: float) -> None:
        start = time.perf_counter()
        time.sleep(seconds)
        self.record(kind, start, time.perf_counter())


def _source(lat: Latencies, log: EventLog, file_index):
    """One simulated file: pays ``open_s`` once, then ``read_s`` per record."""
    import tensorflow as tf

    def records(index):
        log.timed_sleep("open", lat.open_s)
        for i in range(lat.records_per_file):
            log.timed_sleep("read", lat.read_s)
            yield int(index) * lat.records_per_file + i

    return tf.data.Dataset.from_generator(
        records, args=(file_index,), output_signature=tf.TensorSpec((), tf.int64)
    )


def _mapper(lat: Latencies, log: EventLog):
    import tensorflow as tf

    def decode(x):
        # a vectorised map pays a fixed cost per batch, not per record
        log.timed_sleep("map", lat.map_s)
        return x

    def fn(x):
        y = tf.py_function(decode, [x], tf.int64)
        y.set_shape(x.shape)
        return y

    return fn


#: Each variant: which optimisations it switches on (keyword arguments of the pipeline).
VARIANTS = {
    "naive": {},
    "prefetch": {"prefetch": True},
    "parallel interleave": {"interleave": True},
    "parallel map": {"parallel_map": True},
    "cache": {"cache": True},
    "vectorised map": {"vectorize": True},
    "all combined": {
        "prefetch": True,
        "interleave": True,
        "parallel_map": True,
        "cache": True,
        "vectorize": True,
    },
}


def build(lat: Latencies, log: EventLog, pipeline, **flags):
    """One variant's dataset: ``pipeline(files, read_file, decode, batch_size, **flags)``
    (the notebook's own transformations) over the simulated files, with tf.data's own
    rewrites switched off so that each variant shows exactly the optimisations it names."""
    import tensorflow as tf

    files = tf.data.Dataset.range(lat.files)
    # the source is a Python generator: AutoGraph has nothing to convert there
    read_file = tf.autograph.experimental.do_not_convert(lambda i: _source(lat, log, i))
    ds = pipeline(files, read_file, _mapper(lat, log), lat.batch_size, **flags)
    # tf.data quietly rewrites pipelines (it fuses map and batch, appends a prefetch)
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def run(lat: Latencies, pipeline, epochs: int = 3, **flags) -> tuple[list[float], EventLog]:
    """Iterate ``epochs`` epochs with a simulated training step; return each epoch's seconds."""
    log = EventLog()
    ds = build(lat, log, pipeline, **flags)
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for _batch in ds:
            log.timed_sleep("train", lat.train_s)
        seconds.append(time.perf_counter() - start)
    return seconds, log


def compare(lat: Latencies, pipeline, epochs: int = 3, variants=VARIANTS) -> list[dict]:
    """Every variant of ``pipeline`` (a function of ``files, read_file, decode, batch_size``
    and the flags in ``variants``; notebook 03 writes it): its first and steady-state epoch,
    and its speedup over naive (same run).

    As everywhere in the course, the first epoch is reported apart (here it also fills
    the cache) and the steady state is the median of the later epochs.
    """
    if epochs < 2:
        raise ValueError("epochs must be at least 2: the first epoch is reported apart")
    results = []
    for name, options in variants.items():
        seconds, log = run(lat, pipeline, epochs, **options)
        results.append(
            {
                "variant": name,
                "first_epoch_s": seconds[0],
                "epoch_s": statistics.median(seconds[1:]),
                "log": log,
            }
        )
    naive = results[0]["epoch_s"]
    for r in results:
        r["speedup"] = naive / r["epoch_s"]
    return results


def table_rows(results: list[dict]) -> list[list]:
    return [
        [
            r["variant"],
            f"{r['first_epoch_s'] * 1e3:.0f}",
            f"{r['epoch_s'] * 1e3:.0f}",
            f"{r['speedup']:.1f}x",
        ]
        for r in results
    ]


TABLE_HEADERS = ["pipeline", "first epoch ms", "epoch ms (steady)", "speedup vs naive"]

COLORS = {"open": "tab:red", "read": "tab:blue", "map": "tab:orange", "train": "tab:green"}


def plot_timelines(results: list[dict], names=("naive", "all combined")):
    """A Gantt chart per variant: when each open, read, map and train step ran."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    chosen = [r for r in results if r["variant"] in names]
    fig, axes = plt.subplots(
        len(chosen), 1, figsize=(9, 1.6 * len(chosen) + 0.6), sharex=True, squeeze=False
    )
    rows = list(COLORS)
    for ax, r in zip(axes[:, 0], chosen, strict=True):
        for kind, start, end in r["log"].events:
            ax.barh(rows.index(kind), end - start, left=start, color=COLORS[kind], height=0.8)
        ax.set_yticks(range(len(rows)), rows)
        ax.invert_yaxis()
        ax.set_title(f"{r['variant']}: {r['epoch_s'] * 1e3:.0f} ms per steady epoch", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the pipeline was built")
    fig.legend(
        handles=[Patch(color=c, label=k) for k, c in COLORS.items()],
        loc="upper right",
        ncol=4,
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig
