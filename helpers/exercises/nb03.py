"""Checks for notebook 03's exercises (tf.data pipelines): a dataset's steps and one epoch."""

import re
import tempfile
from pathlib import Path

import numpy as np

from helpers.exercises import exercise, require
from helpers.exercises.nb02 import reads

_WRAPPERS = {  # dataset ops that only carry settings (with_options and the like): not steps
    "OptionsDataset", "ModelDataset", "MaxIntraOpParallelismDataset", "PrivateThreadPoolDataset"}
_KINDS = [("parallel map", r"ParallelMapDataset"), ("map", r"MapDataset"),
          ("cache", r"CacheDataset"), ("shuffle", r"ShuffleDataset"),
          ("batch", r"(Parallel)?BatchDataset"), ("prefetch", r"PrefetchDataset")]


def chain(ds) -> list[tuple[str, dict]]:
    """The steps of ``ds``, source first, as ``(kind, attrs)``: a kind of _KINDS or the op."""
    import tensorflow as tf

    graph = tf.compat.v1.GraphDef.FromString(
        tf.raw_ops.DatasetToGraphV2(input_dataset=ds._variant_tensor).numpy())
    nodes = {node.name: node for node in graph.node}
    node = next(n for n in graph.node if n.op == "_Retval")
    steps = []
    while node.input:
        node, after = nodes[node.input[0].lstrip("^").split(":")[0]], node.op
        if "Dataset" not in node.op:
            break
        if node.op not in _WRAPPERS and (node.op, after) != ("MapDataset", "UnbatchDataset"):
            kind = next((kind for kind, pattern in _KINDS
                         if re.fullmatch(pattern + r"(V\d+)?", node.op)), node.op)
            steps.append((kind, node.attr))
    return steps[::-1]


_N, _BATCH, _SHAPE = 20, 6, (2, 2, 1)


@exercise("03.1", "reorder a slow tf.data chain",
          where="`finish` and the maps of `read_tfrecords` under \"Real pipelines\"",
          hint="decode in a parallel map, `.cache()`, `.shuffle(...)`, augment in a parallel "
               "map, `.batch(batch_size)`, `.prefetch(tf.data.AUTOTUNE)`: the tail `finish` "
               "builds. `num_parallel_calls=tf.data.AUTOTUNE` makes a map parallel.",
          right="Same examples as the slow chain, in the lesson's order: decode in parallel, "
                "cache, shuffle, augment in parallel, batch, prefetch last.")
def fast_chain(build) -> str | None:
    import tensorflow as tf

    def decode(record):  # serialised images whose pixels are their label
        image = tf.ensure_shape(tf.io.parse_tensor(record, tf.uint8), _SHAPE)
        return image, tf.cast(image[0, 0, 0], tf.int64)

    records = [tf.io.serialize_tensor(np.full(_SHAPE, i, np.uint8)).numpy() for i in range(_N)]
    ds = build(tf.data.Dataset.from_tensor_slices(records), decode,
               lambda image, label: (tf.image.flip_left_right(image), label), _BATCH)
    require(ds)
    if not isinstance(ds, tf.data.Dataset):
        return f"It returned a {type(ds).__name__}, not a tf.data.Dataset."
    if int(ds.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
        return "Its dataset never ends: one epoch is the records once (no `repeat()` here)."
    sizes, labels = [], []
    for element in ds.take(3 * _N):
        if not (isinstance(element, tuple) and len(element) == 2):
            return "Its elements are not (images, labels) pairs."
        images, batch_labels = element
        if tuple(images.shape[1:]) != _SHAPE:
            return (f"Its images have shape {tuple(images.shape)}: expected batches of {_SHAPE} "
                    "images.")
        if not np.array_equal(images.numpy()[:, 0, 0, 0], batch_labels.numpy()):
            return "Its images and labels no longer belong together."
        sizes.append(int(images.shape[0]))
        labels += batch_labels.numpy().tolist()
    if sorted(labels) != list(range(_N)):
        return (f"One epoch gave {len(labels)} examples for {_N} records "
                f"({len(set(labels))} different ones): keep every example once.")
    if labels == sorted(labels):
        return ("One epoch came in the records' own order: its shuffle does not shuffle (a "
                "buffer of 1 keeps the order). Shuffle with a buffer as large as the data.")
    if sizes != (expected := [_BATCH] * (_N // _BATCH) + [_N % _BATCH]):
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
    if kinds[:augmented].count("batch") > kinds[:augmented].count("UnbatchDataset"):
        return ("It augments whole batches: `augment` takes one example (this notebook's "
                "shifts each image by its own random amount), so map it before `batch`.")
    if not steps[shuffle][1]["reshuffle_each_iteration"].b:
        return "Its shuffle keeps one order for every epoch (reshuffle_each_iteration=False)."
    return None


@exercise("03.2", "skip the files that do not decode",
          where="`image_folder` (\"Real pipelines\") and \"Bad data: skipped, counted, reported\"",
          hint="Decode in `map` (`tf.io.decode_image(tf.io.read_file(path), 1, "
               "expand_animations=False)`), and call `.ignore_errors()` on the dataset AFTER "
               "that map: it drops the elements whose map failed.",
          right="The readable images arrive with their labels; only the two broken files are "
                "skipped, and the epoch goes on.")
def load_images(build) -> str | None:
    import tensorflow as tf

    # broken files where every batch that holds one holds a readable one too: dropping whole
    # batches (`ignore_errors` after `batch`) loses readable images. c.png is in colour.
    labels = {"a.png": 0, "truncated.png": 1, "b.png": 2, "c.png": 3, "notes.txt": 4, "d.png": 5}
    readable = [0, 2, 3, 5]
    with tempfile.TemporaryDirectory() as folder:
        for name, label in labels.items():  # a broken file: a PNG header, cut short
            image = np.full((8, 8, 3 if name == "c.png" else 1), 40 * label + 10, np.uint8)
            Path(folder, name).write_bytes(
                tf.io.encode_png(image).numpy() if label in readable else b"\x89PNG broken")
        ds = build([str(Path(folder, name)) for name in labels], list(labels.values()))
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
    if sorted(found) != readable:
        return (f"It gave labels {sorted(found)}; the readable files have {readable} (the "
                "broken ones are 1 and 4): skip single files, after the map that decodes.")
    return None


@exercise("03.3", "slice shuffled batches on the device",
          where="`device_batches` under \"A small data set kept on the device\"",
          hint="`order = tf.argsort(tf.random.uniform([n]))`, then for each start "
               "`index = order[start:start + batch_size]` and "
               "`(tf.gather(x, index), tf.gather(y, index))`: one order for both.",
          right="One shuffled epoch: every example once, images with their labels, a new order "
                "each epoch, and the batches stay where the data lives.")
def device_epoch(batches) -> str | None:
    import tensorflow as tf

    rows = 10
    gpus = tf.config.list_logical_devices("GPU")[:1]  # the real thing, where there is one
    with tf.device(gpus[0].name if gpus else "/CPU:0"):
        x = tf.reshape(tf.range(2 * rows, dtype=tf.float32), (rows, 2))  # row i: [2i, 2i + 1]
        y = tf.range(rows, dtype=tf.int64)  # int64: not the int32 of shapes and indices
    where = tf.DeviceSpec.from_string(x.device).device_type
    orders = []
    for batch_size in (4, 3):  # two sizes: the answer's own number would fit only one
        copied = []  # what the answer read into Python: a copy to the host, on any device
        with reads(copied.append, batches):
            epoch = batches(x, y, batch_size)
            require(epoch)
            if isinstance(epoch, tf.data.Dataset):  # the same verdict on every device
                return ("It returned a tf.data pipeline, which runs on the host: on a GPU each "
                        "batch is copied over again. Slice with `tf.gather`, in a generator.")
            epoch = list(epoch)
        host = any(getattr(v, "dtype", None) in (x.dtype, y.dtype) and v.shape.rank
                   for v in tf.nest.flatten(copied) if tf.is_tensor(v))
        order, sizes = [], []
        for element in epoch:
            if not (isinstance(element, tuple | list) and len(element) == 2):
                return "Each batch must be an (images, labels) pair."
            xb, yb = element
            if host or not (isinstance(xb, tf.Tensor) and isinstance(yb, tf.Tensor)):
                return ("Its batches went back to the host (the data read with `.numpy()` or "
                        "NumPy, or a batch not a tensor). Slice with `tf.gather` where the data "
                        "lives.")
            if tf.DeviceSpec.from_string(xb.device).device_type != where:
                return f"A batch is on {xb.device}, the data on {x.device}."
            if not np.array_equal(xb.numpy()[:, 0], 2 * yb.numpy()):
                return ("Its images and labels no longer belong together: shuffle one order of "
                        "indices and gather both with it.")
            sizes.append(int(yb.shape[0]))
            order += yb.numpy().tolist()
        if sorted(order) != list(range(rows)):
            return (f"One epoch gave {len(order)} examples of {rows} ({len(set(order))} "
                    "different): every example exactly once, the last partial batch too.")
        if sizes != (expected := [batch_size] * (rows // batch_size) + [rows % batch_size]):
            return f"Its batches hold {sizes} examples; batch_size={batch_size} gives {expected}."
        orders.append(order)
    if orders[0] == list(range(rows)) or orders[0] == orders[1]:
        return "Two epochs came in the same order: shuffle the indices for every epoch."
    return None
