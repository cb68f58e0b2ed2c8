import time

import pytest

from helpers import data, models, tfdata_pipelines


@pytest.fixture(scope="module")
def lesson(tf):
    """Notebook 03's cells (helpers.lessons.nb03): its input_bound."""
    from helpers.lessons import nb03 as tfdata_pipelines

    return tfdata_pipelines


@pytest.fixture(scope="module")
def model_and_data(tf):
    images = data.load("digits", verbose=False)
    model = models.mnist_cnn()
    model.compile("adam", "sparse_categorical_crossentropy")
    return model, images.x_train[:256], images.y_train[:256]


def test_the_verdict_follows_the_epoch_times_without_the_first():
    # the first epoch of each (compiling) is left out, whatever it took
    fed_well = tfdata_pipelines.judge({"compute": [9.0, 1.0, 1.0], "pipeline": [30.0, 1.1, 1.1]})
    assert not fed_well["input_bound"] and fed_well["advice"] == []
    assert fed_well["ratio"] == pytest.approx(1.1) and fed_well["verdict"].startswith("Not")
    starved = tfdata_pipelines.judge({"compute": [9.0, 1.0, 1.2], "pipeline": [1.0, 3.0, 3.3]})
    assert starved["input_bound"] and starved["advice"][0].startswith("prefetch")
    assert starved["compute_epoch_s"] == pytest.approx(1.1)
    assert starved["pipeline_epoch_s"] == pytest.approx(3.15)
    assert starved["waiting_share"] == pytest.approx(1 - 1.1 / 3.15)
    assert starved["verdict"].startswith("Input-bound") and "65%" in starved["verdict"]
    edge = tfdata_pipelines.judge(
        {"compute": [0, 1.0], "pipeline": [0, tfdata_pipelines.THRESHOLD]}
    )
    assert not edge["input_bound"]  # the threshold itself is still "not input-bound"


def _check_structure(result, epochs):
    assert {len(v) for v in result["epoch_seconds"].values()} == {epochs}
    assert result["compute_epoch_s"] > 0 and result["pipeline_epoch_s"] > 0
    assert result["ratio"] == pytest.approx(result["pipeline_epoch_s"] / result["compute_epoch_s"])
    assert result["input_bound"] == (result["ratio"] > tfdata_pipelines.THRESHOLD)
    assert bool(result["advice"]) == result["input_bound"]


def test_an_in_memory_pipeline_is_diagnosed(tf, lesson, model_and_data):
    model, x, y = model_and_data
    result = lesson.input_bound(
        model, tf.data.Dataset.from_tensor_slices((x, y)).batch(64), steps=4
    )
    _check_structure(result, epochs=3)


def test_a_slow_pipeline_is_diagnosed_from_real_epochs(tf, lesson, model_and_data):
    model, x, y = model_and_data
    reads = []

    def slow(image, label):
        def wait(a):
            reads.append(1)
            time.sleep(0.01)
            return a

        image = tf.py_function(wait, [image], tf.uint8)
        image.set_shape((28, 28, 1))
        return image, label

    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(slow).batch(8)
    result = lesson.input_bound(model, ds, steps=3, epochs=2)
    _check_structure(result, epochs=2)
    # one full pass first, the first batch again, then 3 fed steps of 8 images per epoch
    assert len(reads) >= len(x) + 2 * 3 * 8
