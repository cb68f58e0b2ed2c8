"""Plumbing of notebook 03 (tf.data pipelines): the latency harness, the pipeline comparison and
the input-bound diagnosis's verdict.

The tf.data latency benchmark: where an input pipeline's time goes, and what each
optimisation buys.

A synthetic data source pays simulated latencies like real storage does: opening
a file, reading each record, decoding (``map``) and a training step, each a
``time.sleep`` so the numbers do not depend on the CPU. Each variant adds one
optimisation to the naive pipeline, then all are combined. Every event is
logged with its start and end, so a timeline shows what overlaps.
This module is the harness (simulated files and decoding, timing, timelines); the
transformations compared are the notebook's own (``helpers.lessons.tfdata_pipelines``).
The idea is TF's data-performance guide's; the code is ours.

Plumbing for notebook 03's input pipelines: data preparation and measurement.

The pipelines themselves (``from_tensor_slices``, TFRecords written as ``tf.train.Example``
and read with ``TFRecordDataset`` and ``interleave``, image folders, the cache, shuffle,
augment, batch, prefetch tail, ``ignore_errors``) are written in the notebook's own cells;
the ones other places reuse are in ``helpers.lessons.tfdata_pipelines``, generated from them.
What stays here is what the lesson is not about: writing an image folder to read from,
damaging a file on purpose, a memory-fit rule and timing epochs.

Is my model input-bound? The notebook's ``input_bound`` cell times the same training steps fed
from memory and fed by a pipeline; :func:`judge` here turns those times into the verdict.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from helpers import data
from helpers.params import all_of, fits_in_memory, folder, integer, number, one_of, validate
from helpers.timing import measure, no_sync, steady_state


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
                "epoch_s": steady_state(seconds),
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


def write_image_folder(x, y, directory, class_names) -> int:
    """Save images as PNG files in one sub-folder per class; returns how many were written."""
    directory = Path(directory)
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = directory / class_names[int(label)].replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = image[..., 0] if image.shape[-1] == 1 else image
        Image.fromarray(pixels).save(folder / f"{i:06d}.png")
    return len(x)


def corrupt_file(path, at: float = 0.5, length: int = 16) -> None:
    """Overwrite ``length`` bytes in the middle of a file (for demonstrations and tests)."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = b"\xff" * min(length, len(data) - start)
    path.write_bytes(bytes(data))


def fits_on_device(nbytes: int, free_bytes: int, margin: float = 0.5) -> bool:
    """Whether a data set of ``nbytes`` may be pinned on a device with ``free_bytes``,
    keeping ``margin`` of the memory for the model and its activations."""
    return nbytes <= free_bytes * (1 - margin)


def epoch_seconds(ds, epochs: int = 3) -> dict:
    """Iterate ``ds`` for ``epochs`` epochs: the first epoch apart (it fills caches and
    warms up), the steady state as the median of the rest."""
    def one_epoch():
        for _ in ds:
            pass

    timing = measure(one_epoch, warmup=1, repeats=max(1, epochs - 1), sync=no_sync)
    return {"first_epoch_s": timing.first_call_s, "epoch_s": timing.median_s}


#: What to try, in order, when a model waits for its input.
ADVICE = [
    "prefetch(tf.data.AUTOTUNE) as the last step, so input and training overlap",
    "map(..., num_parallel_calls=tf.data.AUTOTUNE) for decoding and augmentation",
    "cache() after decoding, when the decoded data fits in memory",
    "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) over several files",
    "batch before an expensive map, and write that map for a whole batch (vectorise)",
    "move augmentation into the model (Keras preprocessing layers) to run it on the GPU",
]

THRESHOLD = 1.15  # a pipeline-fed epoch within 15% of the compute-only one is not input-bound


def judge(seconds: dict[str, list[float]]) -> dict:
    """The diagnosis from epoch times: ``seconds["compute"]`` and ``seconds["pipeline"]``, one
    figure per epoch, the first of each (compiling) left out of the medians. Notebook 03's
    ``input_bound`` cell times the epochs; this turns them into the ratio, the share of time
    spent waiting for input, a verdict and the advice that applies."""
    times = {name: steady_state(values) for name, values in seconds.items()}
    ratio = times["pipeline"] / times["compute"]
    waiting = max(0.0, 1 - 1 / ratio)
    bound = ratio > THRESHOLD
    verdict = (
        f"Input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one; "
        f"about {waiting:.0%} of the time is spent waiting for data."
        if bound
        else f"Not input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one "
        f"(threshold {THRESHOLD})."
    )
    return {
        "compute_epoch_s": times["compute"],
        "pipeline_epoch_s": times["pipeline"],
        "ratio": ratio,
        "waiting_share": waiting,
        "input_bound": bound,
        "verdict": verdict,
        "advice": ADVICE if bound else [],
        "epoch_seconds": {name: list(values) for name, values in seconds.items()},
    }


def check_parameters(*, dataset, num_images, batch_size, shards, compression, latency_scale,
                     epochs, diagnose_steps, work_dir):
    """Notebook 03's parameters, checked before any work: one line names a wrong one."""
    pixels = math.prod(data.shape_of(dataset))
    return validate(
        dataset=(dataset, one_of(*data.DATASETS)),
        num_images=(num_images, all_of(integer(64, 1_000_000), fits_in_memory(8 * pixels))),
        batch_size=(batch_size, integer(1, 65536)),
        shards=(shards, integer(1, 1024)),
        compression=(compression, one_of("GZIP", "ZLIB", "none")),
        latency_scale=(latency_scale, number(0.01, 10)),
        epochs=(epochs, integer(2, 100)),
        diagnose_steps=(diagnose_steps, integer(1, 100_000)),
        work_dir=(work_dir, folder()),
    )
