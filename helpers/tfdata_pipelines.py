"""Plumbing of notebook 03 (tf.data pipelines): the latency harness (simulated costs that sleep
and log, after TF's data-performance guide), test files, epoch timing, the input-bound verdict."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from types import SimpleNamespace

from PIL import Image

from helpers import data
from helpers.params import all_of, fits_in_memory, folder, integer, number, one_of, validate
from helpers.timing import measure, no_sync, steady_state

TABLE_HEADERS = ["pipeline", "first epoch ms", "epoch ms (steady)", "speedup vs naive"]
COLORS = {"open": "tab:red", "read": "tab:blue", "map": "tab:orange", "train": "tab:green"}
THRESHOLD = 1.15  # a pipeline-fed epoch within 15% of the compute-only one is not input-bound
ADVICE = [  # what to try, in order, when a model waits for its input
    "prefetch(tf.data.AUTOTUNE) as the last step, so input and training overlap",
    "map(..., num_parallel_calls=tf.data.AUTOTUNE) for decoding and augmentation",
    "cache() after decoding, when the decoded data fits in memory",
    "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) over several files",
    "batch before an expensive map, and write that map for a whole batch (vectorise)",
    "move augmentation into the model (Keras preprocessing layers) to run it on the GPU",
]
VARIANTS = {  # which optimisations each variant switches on (the pipeline's keyword arguments)
    "naive": {},
    "prefetch": {"prefetch": True},
    "parallel interleave": {"interleave": True},
    "parallel map": {"parallel_map": True},
    "cache": {"cache": True},
    "vectorised map": {"vectorize": True},
    "all combined": dict.fromkeys(("prefetch", "interleave", "parallel_map", "cache", "vectorize"),
                                  True),
}


@dataclasses.dataclass(frozen=True)
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
        costs = ("open_s", "read_s", "map_s", "train_s")
        return dataclasses.replace(self, **{cost: getattr(self, cost) * scale for cost in costs})


def run(lat: Latencies, pipeline, epochs: int = 3, **flags) -> tuple[list[float], SimpleNamespace]:
    """Each epoch's seconds and the ``events`` (kind, start, end) of ``pipeline(files, read_file,
    decode, batch_size, **flags)`` on simulated files, tf.data's own rewrites off."""
    import tensorflow as tf

    log = SimpleNamespace(events=[])
    origin = time.perf_counter()

    def timed_sleep(kind: str, seconds: float) -> None:  # append is atomic: threads may log at once
        start = time.perf_counter()
        time.sleep(seconds)
        log.events.append((kind, start - origin, time.perf_counter() - origin))

    def records(index):  # one simulated file: opened once, then read record by record
        timed_sleep("open", lat.open_s)
        for i in range(lat.records_per_file):
            timed_sleep("read", lat.read_s)
            yield int(index) * lat.records_per_file + i

    @tf.autograph.experimental.do_not_convert  # a Python generator: nothing to convert
    def read_file(index):
        return tf.data.Dataset.from_generator(records, args=(index,),
                                              output_signature=tf.TensorSpec((), tf.int64))

    def decode(x):  # the simulated decoding: ``map_s`` per call (a vectorised map: per batch)
        timed_sleep("map", lat.map_s)
        return x

    def mapped(x):
        return tf.ensure_shape(tf.py_function(decode, [x], tf.int64), x.shape)

    ds = pipeline(tf.data.Dataset.range(lat.files), read_file, mapped, lat.batch_size, **flags)
    # tf.data quietly rewrites pipelines (it fuses map and batch, appends a prefetch)
    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(options)
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        for _batch in ds:
            timed_sleep("train", lat.train_s)
        seconds.append(time.perf_counter() - start)
    return seconds, log


def compare(lat: Latencies, pipeline, epochs: int = 3, variants=VARIANTS) -> list[dict]:
    """Each variant's first epoch (filling the cache), steady epoch and speedup over naive."""
    if epochs < 2:
        raise ValueError("epochs must be at least 2: the first epoch is reported apart")
    results = []
    for name, options in variants.items():
        seconds, log = run(lat, pipeline, epochs, **options)
        results.append({"variant": name, "first_epoch_s": seconds[0],
                        "epoch_s": steady_state(seconds), "log": log})
    return [{**r, "speedup": results[0]["epoch_s"] / r["epoch_s"]} for r in results]


def table_rows(results: list[dict]) -> list[list]:
    return [[r["variant"], f"{r['first_epoch_s'] * 1e3:.0f}", f"{r['epoch_s'] * 1e3:.0f}",
             f"{r['speedup']:.1f}x"] for r in results]


def plot_timelines(results: list[dict], names=("naive", "all combined")):
    """A Gantt chart per variant: when each open, read, map and train step ran."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    chosen = [r for r in results if r["variant"] in names]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(9, 1.6 * len(chosen) + 0.6), sharex=True,
                             squeeze=False)
    rows = list(COLORS)
    for ax, r in zip(axes[:, 0], chosen, strict=True):
        for kind, start, end in r["log"].events:
            ax.barh(rows.index(kind), end - start, left=start, color=COLORS[kind], height=0.8)
        ax.set_yticks(range(len(rows)), rows)
        ax.invert_yaxis()
        ax.set_title(f"{r['variant']}: {r['epoch_s'] * 1e3:.0f} ms per steady epoch", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the pipeline was built")
    fig.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()], loc="upper right",
               ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def write_image_folder(x, y, directory, class_names) -> int:
    """Save images as PNG files in one sub-folder per class; returns how many were written."""
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = Path(directory) / class_names[int(label)].replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = image[..., 0] if image.shape[-1] == 1 else image
        Image.fromarray(pixels).save(folder / f"{i:06d}.png")
    return len(x)


def corrupt_file(path) -> None:
    """Overwrite 16 bytes in the middle of a file."""
    content = bytearray(Path(path).read_bytes())
    start = len(content) // 2
    content[start : start + 16] = b"\xff" * min(16, len(content) - start)
    Path(path).write_bytes(bytes(content))


def fits_on_device(nbytes: int, free_bytes: int, margin: float = 0.5) -> bool:
    """Whether ``nbytes`` of data may be pinned on a device, ``margin`` left for the model."""
    return nbytes <= free_bytes * (1 - margin)


def epoch_seconds(ds, epochs: int = 3) -> dict:
    """``ds``'s first epoch (caches filled, warm-up) and the median of the ``epochs - 1`` next."""
    timing = measure(lambda: [None for _ in ds], warmup=1, repeats=max(1, epochs - 1), sync=no_sync)
    return {"first_epoch_s": timing.first_call_s, "epoch_s": timing.median_s}


def judge(seconds: dict[str, list[float]]) -> dict:
    """Notebook 03's ``input_bound`` verdict from each epoch's seconds: ratio, waiting, advice."""
    times = {name: steady_state(values) for name, values in seconds.items()}
    ratio = times["pipeline"] / times["compute"]
    waiting = max(0.0, 1 - 1 / ratio)
    bound = ratio > THRESHOLD
    verdict = (f"Input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one; "
               f"about {waiting:.0%} of the time is spent waiting for data." if bound else
               f"Not input-bound: the pipeline-fed epoch takes {ratio:.2f}x the compute-only one "
               f"(threshold {THRESHOLD}).")
    return {"compute_epoch_s": times["compute"], "pipeline_epoch_s": times["pipeline"],
            "ratio": ratio, "waiting_share": waiting, "input_bound": bound, "verdict": verdict,
            "advice": ADVICE if bound else [],
            "epoch_seconds": {name: list(values) for name, values in seconds.items()}}


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
