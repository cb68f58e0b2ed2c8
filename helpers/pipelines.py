"""Input pipelines that keep the accelerator busy, and that survive bad data.

Builders for the three usual sources (arrays in memory, TFRecord files, a
folder of image files), in the order that works: read -> cache -> shuffle ->
augment -> batch -> prefetch. Corrupt records and unreadable images are
skipped, counted and reported, never a crash and never a silent drop.
Used by: 03_tfdata_pipelines (and 04, 05 for their input).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

AUTOTUNE = -1  # tf.data.AUTOTUNE
MANIFEST = "manifest.json"


def augment(image, label, pad: int = 2):
    """Random shifts of up to ``pad`` pixels and a small brightness change (runs in ``map``)."""
    import tensorflow as tf

    shape = tf.shape(image)
    padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
    image = tf.image.random_crop(padded, shape)
    image = tf.image.random_brightness(tf.cast(image, tf.float32), 20.0)
    return tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8), label


def options(deterministic: bool = True, ram_budget_mb: int | None = None):
    """``tf.data.Options``: deterministic order (reproducible) or not (faster), and a RAM
    budget for autotuning's buffers."""
    import tensorflow as tf

    opts = tf.data.Options()
    opts.deterministic = deterministic
    if ram_budget_mb:
        opts.autotune.ram_budget = int(ram_budget_mb) * 2**20
    return opts


def finish(
    ds,
    batch_size: int,
    *,
    shuffle: int = 0,
    augment_fn=None,
    cache: bool = True,
    drop_remainder: bool = False,
    seed: int = 0,
    prefetch: bool = True,
    opts=None,
    report: SkipReport | None = None,
):
    """The common tail of a pipeline: cache, shuffle, augment, batch, prefetch.

    Cache before shuffling and augmenting, so each epoch gets a new order and new
    augmentations from the cached decoded images; batch after shuffling; prefetch last.
    ``cache=False, prefetch=False`` gives the unoptimised tail, for comparisons.
    A ``report`` counts the examples each pass delivers, after the cache: a cached pass
    never runs what comes before the cache, so a count there would see the first pass only.
    """
    if cache:
        ds = ds.cache()
    if report is not None:
        ds = report.counted(ds)
    if shuffle:
        ds = ds.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    if augment_fn is not None:
        ds = ds.map(augment_fn, num_parallel_calls=AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if prefetch:
        ds = ds.prefetch(AUTOTUNE)
    return ds.with_options(opts) if opts is not None else ds


def from_memory(x, y, batch_size: int, **tail):
    """Arrays already in memory (``from_tensor_slices``), then :func:`finish`."""
    import tensorflow as tf

    return finish(tf.data.Dataset.from_tensor_slices((x, y)), batch_size, **tail)


def from_generator(generator, image_shape, batch_size: int, **tail):
    """Examples from a Python generator of ``(image, label)``; ``output_signature`` says
    what it yields, so TensorFlow can build the graph without calling it first."""
    import tensorflow as tf

    signature = (tf.TensorSpec(image_shape, tf.uint8), tf.TensorSpec((), tf.int64))
    ds = tf.data.Dataset.from_generator(generator, output_signature=signature)
    return finish(ds, batch_size, **tail)


# --- TFRecords -----------------------------------------------------------------------------


def _example(image: np.ndarray, label: int) -> bytes:
    import tensorflow as tf

    feature = {
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "shape": tf.train.Feature(int64_list=tf.train.Int64List(value=list(image.shape))),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


COMPRESSIONS = (None, "none", "GZIP", "ZLIB")


def _compression(value) -> str | None:
    """None, "GZIP" or "ZLIB" from what :func:`write_tfrecords` accepts."""
    from helpers.params import ParameterError

    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, str) and value.strip().upper() in ("GZIP", "ZLIB"):
        return value.strip().upper()
    raise ParameterError(
        f"Invalid parameter compression={value!r}: allowed values are None, 'none', 'GZIP', 'ZLIB'."
    )


def write_tfrecords(x, y, directory, shards: int = 4, compression: str | None = None) -> dict:
    """Write uint8 images and labels as ``shards`` TFRecord files plus a manifest.

    ``compression`` is None (or "none"), "GZIP" or "ZLIB", in any case. The manifest
    records the image shape and how many records each file holds, so a reader can tell
    how many it skipped. Returns the manifest.
    """
    import tensorflow as tf

    compression = _compression(compression)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = {None: "", "GZIP": ".gz", "ZLIB": ".zz"}[compression]
    options = tf.io.TFRecordOptions(compression_type=compression or "")
    files = {}
    for shard, index in enumerate(np.array_split(np.arange(len(x)), shards)):
        path = directory / f"part-{shard:05d}-of-{shards:05d}.tfrecord{suffix}"
        with tf.io.TFRecordWriter(str(path), options) as writer:
            for i in index:
                writer.write(_example(x[i], y[i]))
        files[path.name] = len(index)
    manifest = {
        "files": files,
        "records": int(len(x)),
        "shape": list(x.shape[1:]),
        "compression": compression,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def parse_example(shape):
    """The function that turns one serialised ``tf.train.Example`` of :func:`write_tfrecords`
    back into ``(image, label)``, for images of ``shape``. Used by: 03, 05 (through
    helpers.distribute.tfrecord_input_fn)."""
    import tensorflow as tf

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "shape": tf.io.FixedLenFeature([3], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        image = tf.reshape(tf.io.decode_raw(example["image"], tf.uint8), shape)
        return image, example["label"]

    return parse


@dataclass
class SkipReport:
    """Counts what a pipeline delivered in a pass against what its source holds.

    The count is per pass (the latest, or the one under way): after any number of epochs,
    cached or not, ``skipped()`` is what one pass lost. Read it after a full pass.
    """

    expected: int  # examples in one pass over the source
    counter: object  # a tf.Variable: examples delivered so far in the latest pass
    what: str = "records"

    def counted(self, ds):
        """``ds`` with each element counted; the count starts again with every pass (each
        pass enumerates from 0). Used by :func:`finish`, after the cache."""
        counter = self.counter

        def count(index, element):
            counter.assign(index + 1)
            return element

        return ds.enumerate().map(count)

    @property
    def delivered(self) -> int:
        return int(self.counter.numpy())

    def skipped(self) -> int:
        return self.expected - self.delivered

    def reset(self) -> None:
        self.counter.assign(0)

    def summary(self) -> str:
        skipped = self.skipped()
        if skipped == 0:
            return f"All {self.expected} {self.what} read; none skipped."
        return (
            f"Skipped {skipped} of {self.expected} {self.what} (corrupt or unreadable); "
            f"read {self.delivered}."
        )


def _counted(ds, expected: int, what: str):
    """Drop elements that fail (``ignore_errors``); the report counts those that arrive
    (pass it to :func:`finish`)."""
    import tensorflow as tf

    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    return ds.ignore_errors(), SkipReport(expected, counter, what)


def read_tfrecords(directory, batch_size: int, *, parallel: bool = True, **tail):
    """TFRecord files from :func:`write_tfrecords`: interleaved, parsed in parallel,
    bad records skipped and counted. Returns ``(dataset, SkipReport)``."""
    import tensorflow as tf

    directory = Path(directory)
    manifest = json.loads((directory / MANIFEST).read_text())
    paths = [str(directory / name) for name in sorted(manifest["files"])]
    compression = manifest["compression"] or ""
    calls = AUTOTUNE if parallel else None
    files = tf.data.Dataset.from_tensor_slices(paths)
    records = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors(),
        cycle_length=len(paths) if parallel else 1,
        num_parallel_calls=calls,
    )
    ds = records.map(parse_example(manifest["shape"]), num_parallel_calls=calls)
    ds, report = _counted(ds, manifest["records"], "records")
    return finish(ds, batch_size, report=report, **tail), report


def corrupt_file(path, at: float = 0.5, length: int = 16) -> None:
    """Overwrite ``length`` bytes in the middle of a file (for demonstrations and tests)."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = b"\xff" * min(length, len(data) - start)
    path.write_bytes(bytes(data))


# --- A folder of image files ---------------------------------------------------------------


def write_image_folder(x, y, directory, class_names) -> int:
    """Save images as PNG files in one sub-folder per class; returns how many were written."""
    from PIL import Image

    directory = Path(directory)
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = directory / class_names[int(label)].replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = image[..., 0] if image.shape[-1] == 1 else image
        Image.fromarray(pixels).save(folder / f"{i:06d}.png")
    return len(x)


def image_folder(
    directory, image_size, channels: int, batch_size: int, *, parallel: bool = True, **tail
):
    """Images from ``directory/<class>/<file>``, decoded in ``map`` (in parallel unless
    ``parallel=False``); unreadable files are skipped and counted.
    Returns ``(dataset, SkipReport, class_names)``."""
    import tensorflow as tf

    directory = Path(directory)
    class_names = sorted(p.name for p in directory.iterdir() if p.is_dir())
    paths = sorted(str(p) for c in class_names for p in (directory / c).iterdir())
    labels = [class_names.index(Path(p).parent.name) for p in paths]

    def load(path, label):
        raw = tf.io.read_file(path)
        image = tf.io.decode_image(raw, channels=channels, expand_animations=False)
        image = tf.image.resize(image, image_size, method="nearest")
        return tf.cast(image, tf.uint8), label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    ds = ds.map(load, num_parallel_calls=AUTOTUNE if parallel else None)
    ds, report = _counted(ds, len(paths), "image files")
    return finish(ds, batch_size, report=report, **tail), report, class_names


def fits_on_device(nbytes: int, free_bytes: int, margin: float = 0.5) -> bool:
    """Whether a data set of ``nbytes`` may be pinned on a device with ``free_bytes``,
    keeping ``margin`` of the memory for the model and its activations."""
    return nbytes <= free_bytes * (1 - margin)


def epoch_seconds(ds, epochs: int = 3) -> dict:
    """Iterate ``ds`` for ``epochs`` epochs: the first epoch apart (it fills caches and
    warms up), the steady state as the median of the rest. Used by: 03."""
    from helpers.timing import measure, no_sync

    def one_epoch():
        for _ in ds:
            pass

    timing = measure(one_epoch, warmup=1, repeats=max(1, epochs - 1), sync=no_sync)
    return {"first_epoch_s": timing.first_call_s, "epoch_s": timing.median_s}
