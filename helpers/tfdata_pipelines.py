"""Plumbing of notebook 03 (tf.data): a harness of simulated latencies (after TF's guide), files."""

import dataclasses
import itertools
import math
import time
from pathlib import Path
from types import SimpleNamespace

from PIL import Image

from helpers import data, params
from helpers.display import subplots
from helpers.gpu_vs_cpu_benchmark import alternately, called, median_range  # 03 uses them
from helpers.params import all_of, fits_in_memory, folder, integer, number, one_of, validate
from helpers.timing import device_sync

TABLE_HEADERS = ["pipeline", "first epoch ms", "later epochs ms", "speedup vs naive", "verdict"]
COLORS = {"open": "tab:red", "read": "tab:blue", "map": "tab:orange", "train": "tab:green"}
VARIANTS = {  # which optimisations each variant switches on (the pipeline's keyword arguments)
    "naive": {},
    "prefetch": {"prefetch": True},
    "parallel interleave": {"interleave": True},
    "parallel map": {"parallel_map": True},
    "cache": {"cache": True},
    "vectorised map": {"vectorize": True}}
VARIANTS["all combined"] = dict.fromkeys(itertools.chain(*VARIANTS.values()), True)  # every flag


@dataclasses.dataclass(frozen=True)
class Latencies:  # simulated costs in seconds; scaled() shrinks them all (for tests)
    open_s: float = 0.030
    read_s: float = 0.015
    map_s: float = 0.010
    train_s: float = 0.010
    files: int = 4
    records_per_file: int = 6
    batch_size: int = 2

    def scaled(self, scale: float) -> "Latencies":
        costs = ("open_s", "read_s", "map_s", "train_s")
        return dataclasses.replace(self, **{cost: getattr(self, cost) * scale for cost in costs})


def simulation(lat: Latencies, pipeline, **flags):
    """``(epoch, log)``: ``epoch()`` runs ``pipeline`` over simulated files, logging each step."""
    import tensorflow as tf

    log = SimpleNamespace(events=[], epoch_ends=[0.0], origin=0.0)

    def timed_sleep(kind: str, seconds: float) -> None:  # append is atomic: threads may log at once
        start = time.perf_counter()
        time.sleep(seconds)
        log.events.append((kind, start - log.origin, time.perf_counter() - log.origin))

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

    def epoch() -> None:  # timed by its caller
        log.origin = time.perf_counter() - log.epoch_ends[-1]  # the clock goes on from there
        for _batch in ds:
            timed_sleep("train", lat.train_s)
        log.epoch_ends.append(time.perf_counter() - log.origin)

    return epoch, log


def most_at_once(log, kinds: tuple[str, ...]) -> int:
    """The most spans of ``kinds`` (say ``("open", "read")``) in a simulation's log that overlap."""
    edges = sorted((t, step) for kind, start, end in log.events if kind in kinds
                   for t, step in ((start, 1), (end, -1)))  # at a tie, an end comes first
    return max(itertools.accumulate(step for _, step in edges), default=0)


def compare(lat: Latencies, pipeline, epochs: int = 3, variants=VARIANTS) -> list[dict]:
    """Variants' epochs in rounds (2+); ``speedups``: the first one's later epochs over each's."""
    runs = {name: simulation(lat, pipeline, **flags) for name, flags in variants.items()}
    timed = alternately({name: (epoch, device_sync) for name, (epoch, _) in runs.items()},
                        epochs - 1, warm=False)  # an epoch each in turn: the first apart
    base = next(iter(timed.values())).samples_s  # naive's later epochs, one a round
    return [{"variant": name, "first_epoch_s": t.first_call_s, "later_s": t.samples_s,
             "epoch_s": min(t.samples_s), "log": runs[name][1],
             "speedups": [b / v for b, v in zip(base, t.samples_s, strict=True)]}
            for name, t in timed.items()]


def table_rows(results: list[dict]) -> list[list]:
    return [[r["variant"], f"{r['first_epoch_s'] * 1e3:.0f}", median_range(r["later_s"]),
             median_range(r["speedups"], 2, 1, "x"), called(r["speedups"]) if i else "baseline"]
            for i, r in enumerate(results)]


def plot_timelines(results: list[dict]):
    """Per variant, on one time axis: each open, read, map and train step; epoch ends dashed."""
    fig, axes = subplots(len(results), 1, figsize=(9, 0.85 * len(results) + 0.9),
                         sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        for row, (kind, color) in enumerate(COLORS.items()):
            spans = [(start, end - start) for k, start, end in r["log"].events if k == kind]
            ax.broken_barh(spans, (row - 0.4, 0.8), color=color, label=kind)
        ax.set_yticks(range(len(COLORS)), list(COLORS), fontsize=7)
        ax.set_ylim(len(COLORS) - 0.5, -0.5)
        ax.vlines(r["log"].epoch_ends[1:], *ax.get_ylim(), colors="k", linestyles="--", lw=0.8)
        ax.set_title(r["variant"], fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds since the pipeline's first epoch began (its epochs only)")
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="upper right", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig


def write_image_folder(x, y, directory, class_names) -> None:
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = Path(directory) / class_names[int(label)].replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.squeeze()).save(folder / f"{i:06d}.png")  # grey: (H, W)


def corrupt_file(path) -> None:
    content = bytearray(Path(path).read_bytes())
    start = len(content) // 2
    content[start : start + 16] = b"\xff" * min(16, len(content) - start)
    Path(path).write_bytes(bytes(content))


def check_parameters(*, dataset, num_images, batch_size, shards, compression, latency_scale,
                     epochs, diagnose_steps, work_dir):
    """Notebook 03's parameters, checked before any work: one line names a wrong one."""
    return validate(
        dataset=(dataset, one_of(*data.DATASETS)),
        num_images=(num_images, all_of(
            integer(64, 1_000_000), fits_in_memory(8 * math.prod(data.shape_of(dataset))),
            params.enough_images(batch_size, batches=1, name="batch_size"))),
        batch_size=(batch_size, integer(1, 65536)),
        shards=(shards, integer(1, 1024)),
        compression=(compression, one_of("GZIP", "ZLIB", "none")),
        latency_scale=(latency_scale, number(0.01, 10)),
        epochs=(epochs, integer(2, 100)),
        diagnose_steps=(diagnose_steps, integer(1, 100_000)),
        work_dir=(work_dir, folder()))
