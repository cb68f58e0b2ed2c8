import numpy as np
import pytest

from helpers import memory
from helpers.strategy import LateConfigurationError


def injected_oom(limit):
    """A try function that runs out of memory above ``limit``, as a GPU would."""
    import tensorflow as tf

    calls = []

    def try_batch(batch):
        calls.append(batch)
        if batch > limit:
            raise tf.errors.ResourceExhaustedError(None, None, f"OOM when allocating {batch}")

    return try_batch, calls


def test_search_finds_the_largest_batch_with_a_margin(tf):
    try_batch, _ = injected_oom(100)
    result = memory.find_max_batch(try_batch, start=8, margin=0.9, multiple=8)
    assert result.largest_ok == 96  # 128 failed, then 96 fit and 112, 104 did not
    assert result.batch_size == 80  # 90% of 96, down to a multiple of 8
    assert [b for b, r in result.tries if r == "OOM"] == [128, 112, 104]


def test_search_survives_ooms_in_a_row_and_training_works_afterwards(tf):
    import keras

    try_batch, _ = injected_oom(9)
    result = memory.find_max_batch(try_batch, start=8, margin=1.0, multiple=1)
    oom_run = [r for _, r in result.tries][1:4]
    assert oom_run == ["OOM", "OOM", "OOM"] and result.largest_ok == 9
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    history = model.fit(np.ones((32, 4)), np.ones(32), batch_size=result.batch_size, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_other_errors_are_not_taken_for_ooms(tf):
    def broken(batch):
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        memory.find_max_batch(broken)


def test_nothing_fits(tf):
    try_batch, _ = injected_oom(4)
    with pytest.raises(MemoryError, match="even batch_size=8"):
        memory.find_max_batch(try_batch, start=8)


def test_gradient_accumulation_equals_the_large_batch(tf):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    )
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6)).astype("float32")
    y = rng.integers(0, 3, 64)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    full = tape.gradient(loss, model.trainable_variables)
    for micro in (16, 10):  # 10 leaves a short last micro-batch
        accumulated = memory.accumulated_gradients(model, loss_fn, x, y, micro)
        for a, b in zip(full, accumulated, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_late_gpu_configuration_gives_the_clear_message(tf, monkeypatch):
    def too_late(device, enable):
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", too_late)
    with pytest.raises(LateConfigurationError, match="Restart the kernel"):
        memory.configure_gpu_memory(gpus=["fake GPU"])
    assert memory.configure_gpu_memory(gpus=[]).startswith("No GPU")


def test_measurements_on_the_cpu(tf):
    assert memory.peak_rss_mb() > 10
    assert memory.device_memory_mb("CPU:0") is None
