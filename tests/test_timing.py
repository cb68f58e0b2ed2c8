import inspect
import time

import numpy as np
import pytest

from helpers import timing


class FakeClock:
    """A clock that advances only when the timed work says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def test_first_call_is_reported_apart_and_warmup_is_excluded():
    clock = FakeClock()
    durations = iter([5.0, 3.0, 2.0] + [0.1, 0.2, 0.3, 0.4, 0.5])  # compile, warm-ups, steady

    result = timing.measure(
        lambda: clock.advance(next(durations)),
        warmup=3,
        repeats=5,
        sync=timing.no_sync,
        clock=clock,
    )
    assert result.first_call_s == 5.0
    assert result.samples_s == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert result.median_s == pytest.approx(0.3)


def test_clock_stops_only_after_the_device_sync():
    """Asynchronous work: a call returns at once, the device finishes at sync time."""
    clock = FakeClock()
    pending = []

    def dispatch():
        pending.append(0.25)  # queued, not done

    def sync():
        clock.advance(sum(pending))
        pending.clear()

    result = timing.measure(dispatch, warmup=1, repeats=4, sync=sync, clock=clock)
    assert result.samples_s == pytest.approx([0.25] * 4)  # what the device took, each sample
    start = clock()
    dispatch()  # the naive way (notebook 02 shows it): no sync, so it sees nothing
    assert clock() - start == 0.0


def test_calls_syncs_and_clock_reads_are_counted():
    """With the real clock: how often the work runs, syncs and is timed (speed is not tested
    here; ``make bench`` measures it)."""
    calls, syncs, reads = [], [], []

    def clock():
        reads.append(1)
        return time.perf_counter()

    result = timing.measure(
        lambda: calls.append(1),
        warmup=3,
        repeats=5,
        sync=lambda: syncs.append(1),
        clock=clock,
    )
    assert len(calls) == 1 + 2 + 5  # first call, the other warm-ups, then the samples
    assert len(syncs) == 1 + 1 + 5  # after the first call, after warm-up, after each sample
    assert len(reads) == 2 * (1 + 5)  # a start and a stop around the first call and each sample
    assert len(result.samples_s) == 5 and all(s >= 0 for s in result.samples_s)
    assert result.first_call_s >= 0


def test_rate():
    clock = FakeClock()
    result = timing.measure(
        lambda: clock.advance(0.5), repeats=3, sync=timing.no_sync, clock=clock, work=1e9
    )
    assert result.median_s == pytest.approx(0.5) and result.rate == pytest.approx(2e9)
    assert timing.measure(lambda: None, sync=timing.no_sync).rate is None  # no work given


def test_real_device_sync_on_tensorflow(tf):
    x = tf.random.normal((64, 64))
    assert inspect.signature(timing.measure).parameters["sync"].default is timing.device_sync
    result = timing.measure(lambda: tf.matmul(x, x), repeats=3)  # synced by default
    assert result.median_s > 0


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        timing.measure(lambda: None, repeats=0, sync=timing.no_sync)


def test_the_steady_state_leaves_the_warm_up_out():
    assert timing.steady_state([9.0, 1.0, 3.0, 2.0]) == 2.0  # the first (compiling) left out
    assert timing.steady_state([9.0, 8.0, 1.0, 3.0], warmup=2) == 2.0
    assert timing.steady_state([4.0]) == 4.0  # one run: that run
    assert timing.steady_state([1.0, 2.0], warmup=0) == 1.5
    with pytest.raises(ValueError, match="no timings"):
        timing.steady_state([])


def test_projection_names_the_pace_and_what_is_left():
    line = timing.projection("fit on 8 devices", [9.0, 2.0], 12)
    assert line == ("fit on 8 devices: epoch 1 took 9.0 s (compiling), epoch 2 2.0 s; the 10 "
                    "epochs left will take about 20 s at that pace.")
    assert "the 1 epoch left will take about 2 s" in timing.projection("fit", [9.0, 2.0], 3)


def test_epoch_timer_prints_the_projection_after_the_second_epoch(tf, capsys):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((8, 4), "float32")
    for epochs, printed in ((4, 1), (2, 0)):
        timer = timing.epoch_timer("the test model")
        model.fit(x, x[:, :1], epochs=epochs, verbose=0, callbacks=[timer])
        assert len(timer.seconds) == epochs
        out = capsys.readouterr().out
        assert out.count("the test model: epoch 1 took") == printed, out
        assert printed == 0 or "the 2 epochs left" in out
