import numpy as np
import pytest

from helpers import models, precision, throughput


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (64, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, 64)


def test_fit_throughput_reports_steady_state(tf, tiny_data):
    x, y = tiny_data
    result = throughput.fit_throughput(models.mnist_cnn, x, y, batch_size=32, epochs=3)
    assert result["device"] == "cpu" and result["policy"] == "float32" and not result["xla"]
    assert result["images_per_s"] == pytest.approx(64 / result["epoch_s"])
    assert result["first_epoch_s"] > 0
    rows = throughput.result_rows([result])
    assert rows[0][:5] == ["mnist_cnn", "cpu", 32, "float32", "off"]


def test_fit_throughput_under_mixed_bfloat16(tf, tiny_data):
    x, y = tiny_data
    result = throughput.fit_throughput(
        models.mnist_cnn,
        x,
        y,
        batch_size=32,
        epochs=2,
        policy="mixed_bfloat16",
    )
    assert result["policy"] == "mixed_bfloat16"


def test_one_epoch_cannot_give_a_steady_state(tf, tiny_data):
    with pytest.raises(ValueError, match="at least 2"):
        throughput.fit_throughput(models.mnist_cnn, *tiny_data, epochs=1)


def test_models_build_with_float32_outputs(tf):
    import keras

    with precision.precision("mixed_bfloat16"):
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
    assert throughput.speedup(fast, slow) == 3.0
    fig = throughput.plot_batch_sweep([fast, slow])
    assert list(fig.axes[0].lines[0].get_xdata()) == [32, 64]


def test_speedup_lines_never_invent_a_number():
    cpu = {"kind": "cpu", "label": "mnist_cnn", "device": "CPU", "images_per_s": 100.0}
    gpu = {"kind": "gpu", "label": "mnist_cnn", "device": "Tesla T4", "images_per_s": 2500.0}
    (only,) = throughput.speedup_lines([cpu])
    assert only.startswith("CPU only: no speedup can be measured") and "x" not in only.split(":")[0]
    (line,) = throughput.speedup_lines([cpu, gpu])
    assert "Tesla T4 trained 25.0x the images/s of the CPU (2500 vs 100" in line


def test_knob_lines():
    base = {"label": "float32", "policy": "float32", "images_per_s": 100.0}
    mixed = {"label": "mixed_bfloat16", "policy": "mixed_bfloat16", "images_per_s": 150.0}
    xla = {"label": "XLA", "policy": "float32", "images_per_s": 40.0}
    lines = throughput.knob_lines([base, mixed, xla])
    assert lines == [
        "mixed_bfloat16: 1.50x the float32 images/s (faster).",
        "XLA: 0.40x the float32 images/s (slower).",
    ]
    assert "No mixed-precision policy" in throughput.knob_lines([base, xla])[-1]


def test_compare_devices_and_knobs_on_this_cpu(tf, tiny_data):
    x, y = tiny_data
    results = throughput.compare_devices(
        models.mnist_cnn, x, y, {"cpu": "CPU (2 cores)"}, batch_size=32, epochs=2
    )
    assert [r["device"] for r in results] == ["CPU (2 cores)"] and results[0]["kind"] == "cpu"
    runs = throughput.knob_runs(models.mnist_cnn, x, y, "cpu", batch_size=32, epochs=2)
    assert runs[0]["label"] == "float32" and runs[-1]["xla"] is True
