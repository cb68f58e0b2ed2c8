"""Checks for notebook 03's exercises (tf.data pipelines).

The pipeline checks read what a dataset is made of from its graph (the transformations, from
the source to the last one, as TensorFlow serialises them) and what it yields for one epoch;
they never time it.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np

from helpers.exercises import exercise, require

# Dataset ops that only carry settings (with_options and the like): not steps of the chain.
_WRAPPERS = {"OptionsDataset", "ModelDataset", "MaxIntraOpParallelismDataset",
             "PrivateThreadPoolDataset"}
_KINDS = [("parallel map", r"ParallelMapDataset"), ("map", r"MapDataset"),
          ("cache", r"CacheDataset"), ("shuffle", r"ShuffleDataset"),
          ("batch", r"(Parallel)?BatchDataset"), ("prefetch", r"PrefetchDataset")]


def _kind(op: str) -> str:
    for kind, pattern in _KINDS:
        if re.fullmatch(pattern + r"(V\d+)?", op):
            return kind
    return op


def chain(ds) -> list[tuple[str, dict]]:
    """The steps of ``ds`` from its source to its last transformation: ``(kind, attrs)``, kind
    one of "map", "parallel map", "cache", "shuffle", "batch", "prefetch" or the op's name."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(
        tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor).numpy())
    nodes = {node.name: node for node in graph.node}
    node = next(n for n in graph.node if n.op == "_Retval")
    steps = []
    while node.input:
        node = nodes[node.input[0].lstrip("^").split(":")[0]]
        if "Dataset" not in node.op:
            break
        if node.op not in _WRAPPERS:
            steps.append((_kind(node.op), node.attr))
    return steps[::-1]


_N, _BATCH, _SHAPE = 20, 6, (2, 2, 1)


def _records():
    """A dataset of serialised ``tf.train.Example``s (an image and its label), and its
    ``decode`` and ``augment``, as the notebook writes them."""
    import tensorflow as tf

    def example(i):
        image = np.full(_SHAPE, i, np.uint8).tobytes()
        feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                   "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def decode(record):
        parsed = tf.io.parse_single_example(record, spec)
        return tf.reshape(tf.io.decode_raw(parsed["image"], tf.uint8), _SHAPE), parsed["label"]

    def augment(image, label):
        return tf.image.flip_left_right(image), label

    return tf.data.Dataset.from_tensor_slices([example(i) for i in range(_N)]), decode, augment


def _one_epoch(ds) -> tuple[list[int], list[int], str | None]:
    """Batch sizes and labels of one epoch, or what is wrong with its elements."""
    sizes, labels = [], []
    for element in ds.take(3 * _N):
        if not (isinstance(element, tuple) and len(element) == 2):
            return [], [], "Its elements are not (images, labels) pairs."
        images, batch_labels = element
        if tuple(images.shape[1:]) != _SHAPE:
            return [], [], (f"Its images have shape {tuple(images.shape)}: expected batches of "
                            f"{_SHAPE} images.")
        if not np.array_equal(images.numpy()[:, 0, 0, 0], batch_labels.numpy()):
            return [], [], "Its images and labels no longer belong together."
        sizes.append(int(images.shape[0]))
        labels += batch_labels.numpy().tolist()
    return sizes, labels, None


@exercise("03.1", "reorder a slow tf.data chain",
          hint="decode in a parallel map, `.cache()`, `.shuffle(...)`, augment in a parallel "
               "map, `.batch(batch_size)`, `.prefetch(tf.data.AUTOTUNE)`: the tail `finish` "
               "builds. `num_parallel_calls=tf.data.AUTOTUNE` makes a map parallel.",
          right="Same examples as the slow chain, in the lesson's order: decode in parallel, "
                "cache, shuffle, augment in parallel, batch, prefetch last.")
def fast_chain(build) -> str | None:
    import tensorflow as tf

    records, decode, augment = _records()
    ds = build(records, decode, augment, _BATCH)
    require(ds)
    if not isinstance(ds, tf.data.Dataset):
        return f"It returned a {type(ds).__name__}, not a tf.data.Dataset."
    if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
        return "Its dataset never ends: one epoch is the records once (no `repeat()` here)."
    sizes, labels, problem = _one_epoch(ds)
    if problem:
        return problem
    if sorted(labels) != list(range(_N)):
        return (f"One epoch gave {len(labels)} examples for {_N} records "
                f"({len(set(labels))} different ones): keep every example once.")
    if labels == sorted(labels):
        return ("One epoch came in the records' own order: its shuffle does not shuffle (a "
                "buffer of 1 keeps the order). Shuffle with a buffer as large as the data, as "
                "`slow_chain` does.")
    expected = [_BATCH] * (_N // _BATCH) + [_N % _BATCH]
    if sizes != expected:
        return f"Its batches hold {sizes} examples; batch({_BATCH}) of {_N} gives {expected}."
    steps = chain(ds)
    kinds = [kind for kind, _ in steps]
    if kinds[-1] != "prefetch":
        return (f"Its last step is {kinds[-1]}, not prefetch: prefetch last, so that the input "
                "of the next step is ready while the model trains on this one.")
    if "map" in kinds:
        return ("A map still runs one element at a time: give every map "
                "`num_parallel_calls=tf.data.AUTOTUNE`.")
    maps = [i for i, kind in enumerate(kinds) if kind == "parallel map"]
    if len(maps) != 2 or kinds.count("cache") != 1 or kinds.count("shuffle") != 1:
        return (f"Its steps are {kinds[1:]}: expected two maps (decode, augment), one cache "
                "and one shuffle.")
    decoded, augmented = maps
    cache, shuffle, batch = (kinds.index(k) for k in ("cache", "shuffle", "batch"))
    if not decoded < cache < augmented:
        return ("Its cache is not between decode and augment: cache the decoded examples, so "
                "that every epoch skips decoding and still gets new augmentations.")
    if not cache < shuffle < augmented:
        return ("It shuffles before the cache: the cache then replays the first epoch's order "
                "every epoch. Shuffle after the cache, before augmenting.")
    if not augmented < batch:
        return "It augments whole batches: augment each example, then batch."
    if not steps[shuffle][1]["reshuffle_each_iteration"].b:
        return "Its shuffle keeps one order for every epoch (reshuffle_each_iteration=False)."
    return None


_LABELS = {"a.png": 0, "b.png": 1, "truncated.png": 2, "notes.txt": 3, "c.png": 4}
_READABLE = [0, 1, 4]


def _write_files(directory: Path) -> list[str]:
    import tensorflow as tf

    for name, label in _LABELS.items():
        if name.endswith(".png") and label in _READABLE:
            channels = 3 if name == "c.png" else 1  # one colour file: decode it to one channel
            image = np.full((8, 8, channels), 40 * label + 10, np.uint8)
            (directory / name).write_bytes(tf.io.encode_png(image).numpy())
    (directory / "truncated.png").write_bytes(b"\x89PNG broken")
    (directory / "notes.txt").write_text("not an image")
    return [str(directory / name) for name in _LABELS]


@exercise("03.2", "skip the files that do not decode",
          hint="Decode in `map` (`tf.io.decode_image(tf.io.read_file(path), 1, "
               "expand_animations=False)`), and call `.ignore_errors()` on the dataset AFTER "
               "that map: it drops the elements whose map failed.",
          right="The readable images arrive with their labels; the two broken files are "
                "skipped, and the epoch goes on.")
def load_images(build) -> str | None:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as folder:  # made here, removed here
        paths = _write_files(Path(folder))
        ds = build(paths, list(_LABELS.values()))
        require(ds)
        if not isinstance(ds, tf.data.Dataset):
            return f"It returned a {type(ds).__name__}, not a tf.data.Dataset."
        found = []
        try:
            for element in ds.take(20):
                if not (isinstance(element, tuple) and len(element) == 2):
                    return "Its elements are not (image, label) pairs."
                image, label = (t.numpy() for t in element)
                if image.shape != (8, 8, 1) or image.dtype != np.uint8:
                    return (f"An image arrived as {image.dtype} of shape {image.shape}: decode "
                            "each file to uint8 (8, 8, 1), one channel.")
                if abs(int(image[0, 0, 0]) - (40 * int(label) + 10)) > 1:  # grey: +-1
                    return f"The image of label {int(label)} is another file's."
                found.append(int(label))
        except tf.errors.OpError as error:
            return (f"A broken file ended the epoch with {type(error).__name__}: "
                    "`ignore_errors()` must come after the map that decodes.")
    if sorted(found) != _READABLE:
        return (f"It gave labels {sorted(found)}; the readable files have {_READABLE} (the "
                "broken ones are 2 and 3).")
    return None


_ROWS, _EPOCH_BATCH = 10, 4


@exercise("03.3", "slice shuffled batches on the device",
          hint="`order = tf.argsort(tf.random.uniform([n]))`, then for each start "
               "`index = order[start:start + batch_size]` and "
               "`(tf.gather(x, index), tf.gather(y, index))`: one order for both.",
          right="One shuffled epoch: every example once, images with their labels, a new order "
                "each epoch, and the batches stay where the data lives.")
def device_epoch(batches) -> str | None:
    import tensorflow as tf

    device = "/CPU:0"
    for gpu in tf.config.list_logical_devices("GPU")[:1]:  # the real thing, where there is one
        device = gpu.name
    with tf.device(device):
        x = tf.reshape(tf.range(2 * _ROWS, dtype=tf.float32), (_ROWS, 2))  # row i: [2i, 2i + 1]
        y = tf.range(_ROWS)
    where = tf.DeviceSpec.from_string(x.device).device_type
    orders = []
    for _ in range(2):
        epoch = batches(x, y, _EPOCH_BATCH)
        require(epoch)
        if isinstance(epoch, tf.data.Dataset):  # the same verdict on every device: tf.data
            return ("It returned a tf.data pipeline: tf.data runs on the host, so on a GPU "
                    "every batch is made on the CPU and copied over again. Slice the tensors "
                    "where they live, with `tf.gather`, in a plain Python generator.")
        order, sizes = [], []
        for element in epoch:
            if not (isinstance(element, tuple | list) and len(element) == 2):
                return "Each batch must be an (images, labels) pair."
            xb, yb = element
            if not (isinstance(xb, tf.Tensor) and isinstance(yb, tf.Tensor)):
                return (f"A batch is a {type(xb).__name__}, not a tensor: it went back to the "
                        "host. Slice with `tf.gather` where the data lives.")
            if tf.DeviceSpec.from_string(xb.device).device_type != where:
                return f"A batch is on {xb.device}, the data on {x.device}."
            if not np.array_equal(xb.numpy()[:, 0], 2 * yb.numpy()):
                return ("Its images and labels no longer belong together: shuffle one order of "
                        "indices and gather both with it.")
            sizes.append(int(yb.shape[0]))
            order += yb.numpy().tolist()
        if sorted(order) != list(range(_ROWS)):
            return (f"One epoch gave {len(order)} examples of {_ROWS} "
                    f"({len(set(order))} different): every example exactly once, the last "
                    "partial batch too.")
        if max(sizes) > _EPOCH_BATCH:
            return f"Its batches hold {sizes} examples, for batch_size={_EPOCH_BATCH}."
        orders.append(order)
    if orders[0] == list(range(_ROWS)) or orders[0] == orders[1]:
        return "Two epochs came in the same order: shuffle the indices for every epoch."
    return None
