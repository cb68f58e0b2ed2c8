"""Notebook 03's exercise checks: right answers pass; the placeholder and the usual mistakes
each get their own "not yet". Nothing here times a pipeline."""

import numpy as np
import pytest

from helpers import exercises
from helpers.exercises import nb03


def verdict(exercise_id, answer):
    return exercises.check(exercise_id, answer)


def placeholder(*_):
    ...


# 03.1: reorder a slow tf.data chain

def chain_of(tf, *, decode_calls=True, cache="after decode", shuffle="after cache",
             reshuffle=True, augment="before batch", drop=False, prefetch=True, buffer=100):
    auto = tf.data.AUTOTUNE

    def build(records, decode, augment_fn, batch_size):
        calls = auto if decode_calls else None
        ds = records.shuffle(100) if shuffle == "first" else records
        ds = ds.map(decode, num_parallel_calls=calls)
        ds = ds.cache() if cache == "after decode" else ds
        if shuffle == "after cache":
            ds = ds.shuffle(buffer, reshuffle_each_iteration=reshuffle)
        if augment == "before batch":
            ds = ds.map(augment_fn, num_parallel_calls=auto)
        ds = ds.cache() if cache == "after augment" else ds
        ds = ds.batch(batch_size, drop_remainder=drop)
        if augment == "after batch":
            ds = ds.map(augment_fn, num_parallel_calls=auto)
        return ds.prefetch(auto) if prefetch else ds

    return build


def test_chain_right_answers_pass(tf):
    options = tf.data.Options()
    options.deterministic = False
    def own_numbers(records, decode, augment, batch_size):  # parallel maps of 4, not AUTOTUNE
        ds = records.map(decode, num_parallel_calls=4, deterministic=False).cache()
        ds = ds.shuffle(buffer_size=20).map(augment, num_parallel_calls=4)
        return ds.batch(batch_size).prefetch(buffer_size=2)

    for answer in (chain_of(tf), own_numbers,
                   lambda *a: chain_of(tf)(*a).with_options(options)):
        got = verdict("03.1", answer)
        assert got.passed, got.message


def test_the_notebooks_slow_chain_is_not_right(tf):
    def slow_chain(records, decode, augment, batch_size):
        ds = records.prefetch(tf.data.AUTOTUNE).shuffle(10_000)
        ds = ds.map(decode).cache()
        return ds.map(augment).batch(batch_size)

    got = verdict("03.1", slow_chain)
    assert not got.passed and "prefetch last" in got.message


@pytest.mark.parametrize(("wrong", "says"), [
    ({"prefetch": False}, "not prefetch"),
    ({"decode_calls": False}, "one element at a time"),
    ({"cache": "after augment"}, "between decode and augment"),
    ({"shuffle": "first"}, "shuffles before the cache"),
    ({"reshuffle": False}, "one order for every epoch"),
    ({"augment": "after batch"}, "augments whole batches"),
    ({"drop": True}, "keep every example once"),
    ({"buffer": 1}, "its shuffle does not shuffle"),
])
def test_chain_mistakes_are_caught(tf, wrong, says):
    got = verdict("03.1", chain_of(tf, **wrong))
    assert not got.passed
    assert says in got.message


def test_chain_placeholder_and_endless_dataset(tf):
    assert "placeholder" in verdict("03.1", placeholder).message
    got = verdict("03.1", lambda *a: chain_of(tf)(*a).repeat())
    assert not got.passed and "never ends" in got.message


def test_chain_reads_the_steps_in_order(tf):
    ds = tf.data.Dataset.range(8).map(lambda x: x, num_parallel_calls=2).cache().shuffle(4)
    kinds = [kind for kind, _ in nb03.chain(ds.batch(2).prefetch(1))]
    assert kinds[1:] == ["parallel map", "cache", "shuffle", "batch", "prefetch"]


# 03.2: skip the files that do not decode

def loader(tf, *, ignore="after map", channels=1):  # channels=None: decode_image's own
    def load(path, label):
        contents = tf.io.read_file(path)
        image = (tf.io.decode_image(contents, expand_animations=False) if channels is None
                 else tf.io.decode_image(contents, channels, expand_animations=False))
        return image, label

    def build(paths, labels):
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = ds.ignore_errors() if ignore == "before map" else ds
        ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.ignore_errors() if ignore == "after map" else ds

    return build


def test_load_images_right_answer_passes(tf):
    got = verdict("03.2", loader(tf))
    assert got.passed, got.message


@pytest.mark.parametrize(("wrong", "says"), [
    ({"ignore": "before map"}, "must come after the map"),
    ({"ignore": "nowhere"}, "must come after the map"),
    ({"channels": 3}, "one channel"),
    ({"channels": None}, "one channel"),  # each file's own channels: the colour one has 3
])
def test_load_images_mistakes_are_caught(tf, wrong, says):
    got = verdict("03.2", loader(tf, **wrong))
    assert not got.passed
    assert says in got.message


def test_load_images_right_written_otherwise(tf):
    def decode_png(paths, labels):
        def load(path, label):
            return tf.io.decode_png(tf.io.read_file(path), channels=1), label

        ds = tf.data.Dataset.from_tensor_slices((paths, labels)).map(load)
        return ds.ignore_errors(log_warning=True)

    got = verdict("03.2", decode_png)
    assert got.passed, got.message


def test_load_images_placeholder_and_lost_files(tf):
    assert "placeholder" in verdict("03.2", placeholder).message
    got = verdict("03.2", lambda paths, labels: loader(tf)(paths, labels).take(1))
    assert not got.passed and "the readable files have [0, 2, 3, 5]" in got.message


@pytest.mark.parametrize("size", [2, 3])
def test_load_images_dropping_whole_batches_is_caught(tf, size):
    """Previously accepted: the two broken files filled one batch of 2, which `ignore_errors`
    after `batch` dropped alone; now every batch with a broken file holds a readable one."""
    def batched(paths, labels):
        ds = tf.data.Dataset.from_tensor_slices((paths, labels)).map(
            lambda p, y: (tf.io.decode_image(tf.io.read_file(p), 1, expand_animations=False), y))
        return ds.batch(size).ignore_errors().unbatch()

    got = verdict("03.2", batched)
    assert not got.passed and "skip single files" in got.message


def test_load_images_right_with_apply_and_zip(tf):
    def zipped(paths, labels):
        files = tf.data.Dataset.from_tensor_slices(paths).map(tf.io.read_file)
        ds = tf.data.Dataset.zip(files, tf.data.Dataset.from_tensor_slices(labels))
        ds = ds.map(lambda raw, y: (tf.image.decode_png(raw, channels=1), y))
        return ds.apply(tf.data.experimental.ignore_errors())

    got = verdict("03.2", zipped)
    assert got.passed, got.message


# 03.3: slice shuffled batches on the device

def gathered(x, y, batch_size, tf):
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    for start in range(0, int(x.shape[0]), batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.gather(y, index)


def shuffled_once_then_sliced(x, y, batch_size, tf):  # a shuffled copy per epoch, on the device
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    xs, ys = tf.gather(x, order), tf.gather(y, order)
    start = 0
    while start < len(ys):
        yield xs[start:start + batch_size], ys[start:start + batch_size]
        start += batch_size


def test_device_epoch_right_answers_pass(tf):
    for answer in (lambda x, y, b: gathered(x, y, b, tf),
                   lambda x, y, b: list(gathered(x, y, b, tf)),
                   lambda x, y, b: shuffled_once_then_sliced(x, y, b, tf)):
        got = verdict("03.3", answer)
        assert got.passed, got.message


def shuffled_apart(x, y, batch_size, tf):
    xs, ys = tf.random.shuffle(x), tf.random.shuffle(y)
    for start in range(0, int(x.shape[0]), batch_size):
        yield xs[start:start + batch_size], ys[start:start + batch_size]


def full_batches_only(x, y, batch_size, tf):
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    for start in range(0, int(x.shape[0]) - batch_size + 1, batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.gather(y, index)


def on_the_host(x, y, batch_size, tf):
    order, xs, ys = np.random.permutation(int(x.shape[0])), x.numpy(), y.numpy()
    for start in range(0, len(order), batch_size):
        yield xs[order[start:start + batch_size]], ys[order[start:start + batch_size]]


def in_order(x, y, batch_size, tf):
    for start in range(0, int(x.shape[0]), batch_size):
        yield x[start:start + batch_size], y[start:start + batch_size]


def its_own_size(x, y, batch_size, tf):  # previously accepted: batch_size was always 4
    return gathered(x, y, 4, tf)


def even_split(x, y, batch_size, tf):  # previously accepted: 10 in [4, 3, 3], none above 4
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    for index in tf.split(order, [4, 3, 3] if batch_size == 4 else [3, 3, 2, 2]):
        yield tf.gather(x, index), tf.gather(y, index)


def with_tf_data(x, y, batch_size, tf):  # right on a CPU, a copy per batch on a GPU
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(int(x.shape[0])).batch(batch_size)


@pytest.mark.parametrize(("answer", "says"), [
    (shuffled_apart, "no longer belong together"),
    (full_batches_only, "the last partial batch too"),
    (on_the_host, "went back to the host"),
    (in_order, "same order"),
    (its_own_size, "batch_size=3 gives [3, 3, 3, 1]"),
    (even_split, "batch_size=4 gives [4, 4, 2]"),
    (with_tf_data, "runs on the host"),  # refused on every device, this one included
])
def test_device_epoch_mistakes_are_caught(tf, answer, says):
    got = verdict("03.3", lambda x, y, b: answer(x, y, b, tf))
    assert not got.passed
    assert says in got.message


def test_device_epoch_placeholder(tf):
    assert "placeholder" in verdict("03.3", placeholder).message


# 03.1, issue 50: augmenting after `batch`, which the exercise's text rules out (`augment`
# takes one example, as the notebook's does: a random shift per image)

def after_batch(tf, finish):
    def build(records, decode, augment, batch_size):
        ds = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache().shuffle(100)
        return finish(ds.batch(batch_size), augment)

    return build


@pytest.mark.parametrize("finish", [
    lambda ds, augment: ds.map(augment, num_parallel_calls=-1).prefetch(2),
    lambda ds, augment: ds.map(lambda x, y: augment(x, y), num_parallel_calls=-1).prefetch(-1),
    lambda ds, augment: ds.prefetch(2).map(augment, num_parallel_calls=-1).prefetch(-1),
])
def test_chain_augmenting_whole_batches_is_caught(tf, finish):
    got = verdict("03.1", after_batch(tf, finish))
    assert not got.passed
    assert "`augment` takes one example" in got.message and "before `batch`" in got.message


# 03.3, issue 50: batches copied through the host, on any device (this one's CPU included)

def through_numpy(x, y, batch_size, tf):
    xs, ys = x.numpy(), y.numpy()
    order = np.random.permutation(len(ys))
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield tf.constant(xs[index]), tf.constant(ys[index])


def gathered_then_copied(x, y, batch_size, tf):
    for xb, yb in gathered(x, y, batch_size, tf):
        yield tf.constant(xb.numpy()), tf.convert_to_tensor(np.asarray(yb))


def as_array_once(x, y, batch_size, tf):  # eager: the copies are made before any batch
    order, xs = tf.random.shuffle(tf.range(tf.shape(x)[0])), np.array(x)
    return [(tf.convert_to_tensor(xs[index.numpy()]), tf.gather(y, index))
            for index in tf.split(order, [batch_size] * (len(xs) // batch_size)
                                  + [len(xs) % batch_size] * bool(len(xs) % batch_size))]


def labels_through_numpy(x, y, batch_size, tf):
    labels = y.numpy()
    for xb, yb in gathered(x, y, batch_size, tf):
        yield xb, tf.constant(labels[yb.numpy()])


@pytest.mark.parametrize("answer", [through_numpy, gathered_then_copied, as_array_once,
                                    labels_through_numpy])
def test_device_epoch_a_copy_through_the_host_is_caught(tf, answer):
    """Previously accepted on a CPU: the batches were tensors, on the data's device."""
    got = verdict("03.3", lambda x, y, b: answer(x, y, b, tf))
    assert not got.passed and "went back to the host" in got.message


def indices_from_the_host(x, y, batch_size, tf):  # right: the size and indices read, not data
    order = np.random.permutation(int(tf.shape(x)[0]))
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.gather(y, index)


def test_device_epoch_reading_the_size_and_host_indices_is_right(tf):
    got = verdict("03.3", lambda x, y, b: indices_from_the_host(x, y, b, tf))
    assert got.passed, got.message


# 03.1, issue 50: `.unbatch()` adds a plain map of TensorFlow's own before it, which the check
# took for one of the answer's: "A map still runs one element at a time", with every map
# parallel. An unbatched chain whose maps each see one example is the lesson's order (the
# task's `decode` and `augment` each take one example); augmenting batches stays wrong.

def unbatched(tf, shape, how):
    A = tf.data.AUTOTUNE

    def build(records, decode, augment, batch_size):
        spec = (tf.TensorSpec(shape, tf.uint8), tf.TensorSpec((), tf.int64))
        if how == "decoded in batches":  # map_fn decodes each record of a batch of records
            ds = records.batch(8).map(lambda r: tf.map_fn(decode, r, fn_output_signature=spec),
                                      num_parallel_calls=A).unbatch().cache().shuffle(100)
            return ds.map(augment, num_parallel_calls=A).batch(batch_size).prefetch(A)
        ds = records.map(decode, num_parallel_calls=A)
        if how == "shuffled before the cache":
            ds = ds.batch(batch_size).unbatch().shuffle(100).cache()
        else:
            ds = ds.cache().shuffle(100).batch(batch_size)
        if how == "shuffled before the cache":
            ds = ds.map(augment, num_parallel_calls=A)
        elif how == "unbatched before augment":
            ds = ds.unbatch().map(augment, num_parallel_calls=A)
        elif how == "augment not parallel":
            ds = ds.unbatch().map(augment)
        elif how == "augmented batches, unbatched":
            ds = ds.map(augment, num_parallel_calls=A).unbatch()
        else:  # "rebatched at the end"
            ds = ds.unbatch().map(augment, num_parallel_calls=A).batch(batch_size).unbatch()
        return ds.batch(batch_size).prefetch(A)

    return build


@pytest.mark.parametrize(("how", "says"), [
    ("decoded in batches", None), ("unbatched before augment", None),
    ("rebatched at the end", None),
    ("augmented batches, unbatched", "It augments whole batches"),
    ("augment not parallel", "A map still runs one element at a time"),
    ("shuffled before the cache", "It shuffles before the cache"),
])
def test_chain_with_unbatch_is_judged_by_its_own_maps(tf, how, says):
    got = verdict("03.1", unbatched(tf, nb03._SHAPE, how))
    assert got.passed == (says is None) and (says or "") in got.message, got.message


# 03.3, issue 50: NumPy's functions bound atop the learner's cell, before the check ran

BOUND_FIRST = """
from numpy import array, asarray
from numpy import asarray as to_host


def as_arrays(x, y, batch_size):  # the data copied once, through NumPy, then sliced
    xs, ys = asarray(x), asarray(y)
    order = np.random.permutation(len(ys))
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield tf.constant(xs[index]), tf.constant(ys[index])


def copied_with_array(x, y, batch_size):  # each batch gathered, then copied through NumPy
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    for start in range(0, int(x.shape[0]), batch_size):
        index = order[start:start + batch_size]
        yield tf.constant(array(tf.gather(x, index))), tf.constant(array(tf.gather(y, index)))


def labels_to_host(x, y, batch_size):  # the labels only, copied under another name
    labels = to_host(y)
    order = tf.random.shuffle(tf.range(tf.shape(x)[0]))
    for start in range(0, int(x.shape[0]), batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.constant(labels[index.numpy()])
"""


@pytest.mark.parametrize("name", ["as_arrays", "copied_with_array", "labels_to_host"])
def test_device_epoch_numpy_bound_before_the_check_is_still_seen(tf, name):
    cell = {"tf": tf, "np": np}
    exec(BOUND_FIRST, cell)
    got = verdict("03.3", cell[name])
    assert not got.passed and "went back to the host" in got.message, got.message
    assert cell["asarray"] is cell["to_host"] is np.asarray, "the cell's names, put back"
