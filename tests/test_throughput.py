import numpy as np
import pytest

from helpers import devices, models, timing


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (64, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, 64)


def test_epoch_result_keeps_the_first_epoch_apart():
    result = timing.epoch_result(
        [9.0, 2.0, 4.0, 3.0], 600, label="mnist_cnn", kind="gpu", device="Tesla T4",
        batch_size=32, policy="mixed_float16", xla=True,
    )
    assert result["first_epoch_s"] == 9.0 and result["epoch_s"] == 3.0  # median of 2, 4, 3
    assert result["images_per_s"] == pytest.approx(200.0) and result["epochs"] == 4
    rows = timing.result_rows([result])
    assert rows[0] == ["mnist_cnn", "Tesla T4", 600, 32, "mixed_float16", "on", "9.00", "3.000",
                       "200"]
    assert len(rows[0]) == len(timing.RESULT_HEADERS)


def test_one_epoch_cannot_give_a_steady_state():
    with pytest.raises(ValueError, match="need at least 2"):
        timing.epoch_result([1.0], 64, label="x", kind="cpu", device="CPU", batch_size=32)


def test_epoch_timer_times_each_epoch_of_a_real_fit(tf, tiny_data):
    import keras

    model = models.mnist_cnn()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    timer = timing.epoch_timer()
    model.fit(*tiny_data, batch_size=32, epochs=2, verbose=0, callbacks=[timer])
    assert len(timer.seconds) == 2 and all(s > 0 for s in timer.seconds)
    assert isinstance(timer, keras.callbacks.Callback)


def test_models_build_with_float32_outputs(tf):
    import keras

    with devices.precision("mixed_bfloat16"):
        for build, shape in [(models.mnist_cnn, (28, 28, 1)), (models.cifar_cnn, (32, 32, 3))]:
            model = build(shape)
            out = model(np.zeros((2, *shape), dtype="float32"))
            assert out.shape == (2, 10) and out.dtype == "float32"
            assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"


def test_speedup_and_batch_plot():
    fast, slow = (
        {"images_per_s": 300.0, "batch_size": 64},
        {"images_per_s": 100.0, "batch_size": 32},
    )
    assert timing.knob_lines([slow, {**fast, "label": "x"}]) == [
        "x: 3.00x the float32 images/s (faster)."]
    fig = timing.plot_batch_sweep([fast, slow])
    assert list(fig.axes[0].lines[0].get_xdata()) == [32, 64]


def test_speedup_lines_never_invent_a_number():
    cpu = {"kind": "cpu", "label": "mnist_cnn", "device": "CPU", "images_per_s": 100.0}
    gpu = {"kind": "gpu", "label": "mnist_cnn", "device": "Tesla T4", "images_per_s": 2500.0}
    (only,) = timing.speedup_lines([cpu])
    assert only.startswith("CPU only: no speedup can be measured") and "x" not in only.split(":")[0]
    (line,) = timing.speedup_lines([cpu, gpu])
    assert "Tesla T4 trained 25.0x the images/s of the CPU (2500 vs 100" in line


def test_speedups_pair_each_model_with_its_own_cpu_run():
    runs = [
        {"kind": kind, "label": label, "device": kind.upper(), "images_per_s": ips}
        for kind, label, ips in [
            ("cpu", "mnist_cnn", 100.0), ("gpu", "mnist_cnn", 1000.0),
            ("cpu", "cifar_cnn", 50.0), ("gpu", "cifar_cnn", 1000.0),
        ]
    ]
    mnist, cifar = timing.speedup_lines(runs)
    assert mnist.startswith("mnist_cnn: GPU trained 10.0x") and "(1000 vs 100," in mnist
    assert cifar.startswith("cifar_cnn: GPU trained 20.0x") and "(1000 vs 50," in cifar


def test_knob_lines():
    base = {"label": "float32", "policy": "float32", "images_per_s": 100.0}
    mixed = {"label": "mixed_bfloat16", "policy": "mixed_bfloat16", "images_per_s": 150.0}
    xla = {"label": "XLA", "policy": "float32", "images_per_s": 40.0}
    lines = timing.knob_lines([base, mixed, xla])
    assert lines == [
        "mixed_bfloat16: 1.50x the float32 images/s (faster).",
        "XLA: 0.40x the float32 images/s (slower).",
    ]
