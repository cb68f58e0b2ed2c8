import time

import pytest

from helpers import data, diagnose, models, pipelines


@pytest.fixture(scope="module")
def model_and_data(tf):
    images = data.load("digits", verbose=False)
    model = models.mnist_cnn()
    model.compile("adam", "sparse_categorical_crossentropy")
    return model, images.x_train[:256], images.y_train[:256]


def test_an_in_memory_pipeline_is_not_input_bound(tf, model_and_data):
    model, x, y = model_and_data
    result = diagnose.input_bound(model, pipelines.from_memory(x, y, 64), steps=4)
    assert result["ratio"] < 2 and result["compute_epoch_s"] > 0


def test_a_slow_pipeline_is_found_input_bound_with_advice(tf, model_and_data):
    model, x, y = model_and_data

    def slow(image, label):
        image = tf.py_function(lambda a: (time.sleep(0.05), a)[1], [image], tf.uint8)
        image.set_shape((28, 28, 1))
        return image, label

    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(slow).batch(8)
    result = diagnose.input_bound(model, ds, steps=3, epochs=2)
    assert result["input_bound"] and result["ratio"] > diagnose.THRESHOLD
    assert result["verdict"].startswith("Input-bound") and result["advice"][0].startswith(
        "prefetch"
    )
