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


def test_child_process_trainer_returns_results_and_exits(tf):
    from helpers import data

    images = data.load("digits", limit=64, verbose=False)
    result = memory.train_in_child("mnist_cnn", images.x_train, images.y_train, 32, steps=2)
    assert result["exit_code"] == 0  # the process is gone, and its memory with it
    assert np.isfinite(result["history"]["loss"][0])
    assert len(result["weights"]) == 8 and result["step_rss_mb"] >= 0
    gpus = len(tf.config.list_physical_devices("GPU"))  # set up before its first op:
    expected = f"Memory growth on for {gpus} GPU(s)." if gpus else "No GPU"
    assert result["memory_setting"].startswith(expected)


def test_child_errors_reach_the_parent(tf):
    with pytest.raises(RuntimeError, match="the child process failed: KeyError"):
        memory.train_in_child("no_such_model", np.zeros((4, 28, 28, 1)), np.zeros(4), 2)


def test_cpu_budget_search_uses_the_same_search(tf):
    calls = []

    def fake_child(model, x, y, batch, steps, policy, gpu_limit_mb):
        calls.append((batch, len(x)))
        return {"step_rss_mb": batch * 1.0, "gpu_peak_mb": None}  # 1 MiB per example

    import helpers.memory as m

    original = m.train_in_child
    m.train_in_child = fake_child
    try:
        try_batch = memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), 40)
        result = memory.find_max_batch(try_batch, start=8, margin=1.0, multiple=1)
    finally:
        m.train_in_child = original
    assert result.largest_ok == 40 and calls[0] == (8, 16)  # two steps' worth of examples


def test_estimate_grows_with_the_batch_through_activations(tf):
    from helpers import models

    small, large = (memory.estimate_mb(models.mnist_cnn(), b) for b in (32, 256))
    assert small["parameters"] == large["parameters"] > 0
    assert large["activations"] == pytest.approx(8 * small["activations"])
    assert small["optimizer slots"] == pytest.approx(2 * small["gradients"])
    frozen = models.mnist_cnn()
    for layer in frozen.layers[:3]:  # freeze the rescaling and both convolutions
        layer.trainable = False
    cold = memory.estimate_mb(frozen, 32)
    assert cold["parameters"] == pytest.approx(small["parameters"])  # weights still held
    assert cold["gradients"] < small["gradients"] and cold["total"] < small["total"]


def test_the_child_limits_each_gpu_before_its_first_op(tf, monkeypatch):
    calls = []
    monkeypatch.setattr(
        tf.config, "set_logical_device_configuration", lambda gpu, cfg: calls.append((gpu, cfg))
    )
    monkeypatch.setattr(
        tf.config.experimental, "set_memory_growth", lambda gpu, on: calls.append((gpu, on))
    )
    said = memory.child_memory_setup({"gpu_limit_mb": 512}, gpus=["gpu0", "gpu1"])
    assert said == "Each of 2 GPU(s) limited to 512 MiB."
    assert [gpu for gpu, _ in calls] == ["gpu0", "gpu1"]
    assert calls[0][1][0].memory_limit == 512
    calls.clear()
    assert memory.child_memory_setup({}, gpus=["gpu0"]).startswith("Memory growth on")
    assert calls == [("gpu0", True)]


def test_on_a_gpu_the_budget_is_the_childs_limit_and_real_ooms_count(tf, monkeypatch):
    limits = []

    def fake_child(model, x, y, batch, steps, policy, gpu_limit_mb):
        limits.append(gpu_limit_mb)
        if batch > 24:  # what the child reports when TF runs out of its limited memory
            raise memory.ChildOutOfMemory("ResourceExhaustedError: OOM when allocating tensor")
        return {"step_rss_mb": 0.0, "gpu_peak_mb": batch * 1.0}

    monkeypatch.setattr(memory, "train_in_child", fake_child)
    search = memory.find_max_batch(
        memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), 100),
        start=8,
        margin=1.0,
        multiple=1,
    )
    assert search.largest_ok == 24 and search.ooms >= 2
    assert set(limits) == {100}
    memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), float("inf"))(8)
    assert limits[-1] is None  # no budget: no limit, memory grows as needed
