import time

import numpy as np
import pytest

from helpers import data, models


@pytest.fixture(scope="module")
def lesson(tf):
    """Notebook 03's cells (helpers.lessons.nb03): input_bound, what_to_try, finish."""
    from helpers.lessons import nb03

    return nb03


@pytest.fixture(scope="module")
def model_and_data(tf):
    images = data.load("digits", verbose=False)
    model = models.mnist_cnn()
    model.compile("adam", "sparse_categorical_crossentropy")
    return model, images.x_train[:256], images.y_train[:256]


def _check(report, lesson):
    assert 0 < report["compute_epoch_s"] < report["pipeline_epoch_s"]
    waiting = report["pipeline_epoch_s"] - report["compute_epoch_s"]
    assert report["waiting_share"] == pytest.approx(waiting / report["pipeline_epoch_s"])
    assert report["input_bound"] == (report["waiting_share"] > lesson.THRESHOLD)


def test_batches_ready_at_once_are_not_input_bound(tf, lesson, model_and_data):
    model, x, y = model_and_data
    batches = [(tf.constant(x[i : i + 32]), tf.constant(y[i : i + 32])) for i in (0, 32)]

    def forever():  # an iterator of batches that are ready: no tf.data at all
        while True:
            yield from batches

    report = lesson.input_bound(model, forever(), steps=4)
    _check(report, lesson)
    assert not report["input_bound"], report


def test_a_pipeline_that_sleeps_per_element_is_input_bound(tf, lesson, model_and_data):
    model, x, y = model_and_data
    reads = []

    def slow(image, label):
        def wait(a):
            reads.append(1)
            time.sleep(0.02)  # 0.6 s a batch of 32: far more than a step of mnist_cnn
            return a

        image = tf.ensure_shape(tf.py_function(wait, [image], tf.uint8), (28, 28, 1))
        return image, label

    ds = tf.data.Dataset.from_tensor_slices((x[:64], y[:64])).map(slow).batch(32)
    report = lesson.input_bound(model, ds, steps=2, warmup=1)
    _check(report, lesson)
    assert report["input_bound"], report
    assert len(reads) >= 3 * 32  # the warm-up step and 2 timed ones; the pipeline repeats


def test_what_to_try_names_what_the_pipeline_lacks(tf, lesson):
    source = tf.data.Dataset.from_tensor_slices((np.zeros((8, 2, 2, 1), np.uint8), np.arange(8)))
    plain = lesson.finish(source.map(lambda a, b: (a, b)), 4, cache=False, prefetch=False)
    tips = lesson.what_to_try(plain)
    assert [tip.split("(")[0] for tip in tips] == ["map", "cache", "prefetch"]
    files = tf.data.Dataset.from_tensor_slices(["a", "b"]).interleave(tf.data.TFRecordDataset)
    assert lesson.what_to_try(lesson.finish(files, 4))[0].startswith("interleave(")
    tuned = lesson.finish(source.map(lambda a, b: (a, b), num_parallel_calls=2), 4)
    assert lesson.what_to_try(tuned)[0].startswith("augmentation on the accelerator")
