import numpy as np
import pytest

from helpers import gpu_vs_cpu_benchmark, models, timing


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, (64, 28, 28, 1), dtype=np.uint8), rng.integers(0, 10, 64)


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

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        for build, shape in [(models.mnist_cnn, (28, 28, 1)), (models.cifar_cnn, (32, 32, 3))]:
            model = build(shape)
            out = model(np.zeros((2, *shape), dtype="float32"))
            assert out.shape == (2, 10) and out.dtype == "float32"
            assert model.layers[-1].dtype_policy.name == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_ratio_lines_pair_rounds_and_judge_only_what_every_round_agrees_on():
    rates = {"base": np.array([100.0, 110.0, 90.0, 100, 100]),  # five rounds after the first
             "fast": np.array([300.0, 330.0, 270.0, 300, 300]),
             "slow": np.array([40.0, 44.0, 36.0, 40, 40]),
             "mixed": np.array([120.0, 100.0, 90.0, 100, 100])}
    fast, slow, mixed = gpu_vs_cpu_benchmark.ratio_lines(
        rates, [("fast", "base"), ("slow", "base"), ("mixed", "base")])
    assert fast == ("fast over base, images/s in the rounds after the first: 3.00x (3.00-3.00x), "
                    "faster in every round.")
    assert slow.endswith("0.40x (0.40-0.40x), slower in every round.")
    assert mixed.startswith("mixed over base, images/s in the rounds after the first: 1.00x")
    assert mixed.endswith("no clear difference (the rounds disagree, or come within 3%).")
    (few,) = gpu_vs_cpu_benchmark.ratio_lines({"a": np.array([2.0, 3.0]), "b": np.ones(2)},
                                              [("a", "b")])  # two rounds agreeing: not enough
    assert few.endswith("2.50x (2.00-3.00x), too few rounds (2) to tell: pass epochs >= 6.")
    assert gpu_vs_cpu_benchmark.ratio_lines(rates, []) == []  # no pair, nothing invented


def test_plot_rates_draws_medians_with_their_range():
    from matplotlib.container import ErrorbarContainer

    rates = {"batch 32": np.array([1.0, 3.0, 2.0]), "batch 64": np.array([4.0, 6.0, 5.0]),
             "XLA": np.array([1.0, 1.0, 1.0])}
    fig = gpu_vs_cpu_benchmark.plot_rates(rates, {"batch": ["batch 32", "batch 64"],
                                                  "knob": ["batch 64", "XLA"]}, "t")
    batch, knob = fig.axes
    assert [bar.get_height() for bar in batch.patches] == [2.0, 5.0]  # medians
    bars = next(c for c in batch.containers if isinstance(c, ErrorbarContainer))
    first = bars.lines[2][0].get_segments()[0]  # the first bar's error bar: min to max
    assert list(first[:, 1]) == [1.0, 3.0]
    assert [t.get_text() for t in knob.get_xticklabels()] == ["batch 64", "XLA"]
    assert batch.get_ylabel().startswith("images/s")


def test_timeline_segments_start_at_the_event_before_them():
    every = [(0.001, 0.002), (0.003, 0.004)]  # (call returned, value read), in seconds
    at_end = [(0.001, 0.005), (0.002, 0.0055)]
    fig = gpu_vs_cpu_benchmark.plot_timelines({"every": every, "at end": at_end})
    spans = [[(round(p.vertices[:, 0].min(), 6), round(np.ptp(p.vertices[:, 0]), 6))
              for p in bars.get_paths()] for bars in fig.axes[0].collections]  # (start, ms)
    assert spans == [
        [(0.0, 1.0), (2.0, 1.0)],  # every step: calls from the last read
        [(1.0, 1.0), (3.0, 1.0)],  # and each wait from its call's return
        [(0.0, 1.0), (1.0, 1.0)],  # at the end: calls back to back
        [(2.0, 3.0), (5.0, 0.5)],  # then one wait for the device, and a read at once
    ]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["every", "at end"]
