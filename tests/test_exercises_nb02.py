"""Notebook 02's exercise checks: right answers pass; the placeholder and the usual mistakes
each get their own "not yet". The timing checks run on a stand-in device whose costs are sleeps
the check chooses, so nothing here compares two real timings."""

import statistics
import time
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import exercises
from helpers.logs import import_tensorflow


def verdict(exercise_id, answer):
    return exercises.check(exercise_id, answer)


def placeholder(*_):
    ...


# 02.1: time any call correctly

def synced_samples(fn, repeats, tf):
    fn()
    tf.test.experimental.sync_devices()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        tf.test.experimental.sync_devices()
        samples.append(time.perf_counter() - start)
    return samples


def synced(fn, repeats, tf):
    return float(np.median(synced_samples(fn, repeats, tf)))


def read_result(fn, repeats):
    fn().numpy()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        float(fn())  # reading the value waits for the device too
        samples.append(time.perf_counter() - start)
    return np.median(samples)


def no_sync(fn, repeats):
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def no_warm_up(fn, repeats):
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn().numpy()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def in_milliseconds(fn, repeats, tf):
    return synced(fn, repeats, tf) * 1e3


def total_over_repeats(fn, repeats, tf):
    fn().numpy()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    tf.test.experimental.sync_devices()
    return (time.perf_counter() - start) / repeats


def as_dict(fn, repeats):
    fn().numpy()
    return {"median_s": 0.01}


def test_timing_right_answers_pass(tf):
    for answer in (lambda fn, r: synced(fn, r, tf), read_result):
        got = verdict("02.1", answer)
        assert got.passed, got.message


@pytest.mark.parametrize(("answer", "says"), [
    (placeholder, "placeholder"),
    (no_sync, "nothing waited for it"),
    (no_warm_up, "warm up"),
    (as_dict, "not a number"),
])
def test_timing_mistakes_are_caught(tf, answer, says):
    got = verdict("02.1", answer)
    assert not got.passed
    assert says in got.message


def test_timing_milliseconds_are_caught(tf):
    got = verdict("02.1", lambda fn, r: in_milliseconds(fn, r, tf))
    assert not got.passed and "return seconds" in got.message


def test_timing_the_mean_is_caught(tf):
    got = verdict("02.1", lambda fn, r: total_over_repeats(fn, r, tf))
    assert not got.passed and "median" in got.message


def best_sample(fn, repeats, tf):  # timeit's way: the fastest sample
    return min(synced_samples(fn, repeats, tf))


def test_timing_the_best_sample_is_caught(tf):
    got = verdict("02.1", lambda fn, r: best_sample(fn, r, tf))
    assert not got.passed and "not the best one (`min`" in got.message


CELL_LEVEL_SYNC = """
sync = tf.test.experimental.sync_devices  # bound once, at the top of the learner's cell


def time_it(fn, repeats):
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
"""


def test_timing_with_sync_bound_at_the_top_of_the_cell_is_right(tf):
    cell = {"tf": tf, "time": time, "statistics": statistics}
    exec(CELL_LEVEL_SYNC, cell)
    got = verdict("02.1", cell["time_it"])
    assert got.passed, got.message
    assert cell["sync"] is tf.test.experimental.sync_devices, "the learner's name, put back"


def test_timing_with_sync_as_a_default_argument_is_right(tf):
    """Previously rejected: a default argument kept the real sync_devices, which never waited."""
    def timed(fn, repeats, sync=tf.test.experimental.sync_devices):
        fn()
        sync()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)

    got = verdict("02.1", timed)
    assert got.passed, got.message
    assert timed.__defaults__ == (tf.test.experimental.sync_devices,), "put back"


def test_timing_with_sync_imported_inside_is_right(tf):
    def timed(fn, repeats):  # previously rejected: the import bypassed the stand-in
        from tensorflow.python.framework.test_util import sync_devices

        fn()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            sync_devices()
            samples.append(time.perf_counter() - start)
        return float(np.percentile(samples, 50))

    got = verdict("02.1", timed)
    assert got.passed, got.message


def test_timing_check_restores_sync_devices(tf):
    before = tf.test.experimental.sync_devices
    verdict("02.1", no_sync)
    assert tf.test.experimental.sync_devices is before


# 02.2: build a model in mixed precision

def build(kind, policy=None, last_dtype="float32", restore=True, hidden="relu"):
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(
        policy or ("mixed_float16" if kind == "gpu" else "mixed_bfloat16"))
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation=hidden),
                              keras.layers.Dense(10, dtype=last_dtype)])
    keras.mixed_precision.set_global_policy(previous if restore else "float32")
    return model


@pytest.mark.parametrize(("answer", "says"), [
    (placeholder, "placeholder"),
    (lambda kind: build(kind, restore=False), "it was"),
    (lambda kind: build(kind, last_dtype=None), "dtype=\"float32\""),
    (lambda kind: build(kind, policy="mixed_float16"), "'mixed_bfloat16'"),
    (lambda kind: build(kind, policy="float16"), "weights"),
    (lambda kind: build(kind, hidden="sigmoid"), "activation='sigmoid'"),
])
def test_mixed_mistakes_are_caught(tf, answer, says):
    import keras

    before = keras.mixed_precision.global_policy().name
    got = verdict("02.2", answer)
    assert not got.passed
    assert says in got.message
    assert keras.mixed_precision.global_policy().name == before, "the check restores it"


def unbuilt(kind):
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16" if kind == "gpu" else "mixed_bfloat16")
    try:  # no keras.Input: its weights are made when it first sees data
        return keras.Sequential([keras.layers.Dense(256, activation="relu"),
                                 keras.layers.Dense(10, dtype="float32")])
    finally:
        keras.mixed_precision.set_global_policy(previous)


def with_keras_activation(kind):  # right: the activation given as a function
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16" if kind == "gpu" else "mixed_bfloat16")
    try:
        hidden = keras.layers.Dense(256, activation=keras.activations.relu)
        return keras.Sequential([keras.Input((784,)), hidden,
                                 keras.layers.Dense(10, dtype="float32")])
    finally:
        keras.mixed_precision.set_global_policy(previous)


def test_mixed_right_answers_pass(tf):
    for answer in (build, unbuilt, with_keras_activation):
        got = verdict("02.2", answer)
        assert got.passed, got.message


def test_mixed_wrong_input_size_is_caught(tf):
    import keras

    def images(kind):
        return keras.Sequential([keras.Input((28, 28)), keras.layers.Dense(10)])

    got = verdict("02.2", images)
    assert not got.passed and "784 inputs" in got.message


# 02.3: average the loss without stalling

def running_sum(step, steps, tf):
    total = tf.zeros(())
    for _ in range(steps):
        total += step()
    return float(total) / steps


def list_read_at_the_end(step, steps):
    losses = [step() for _ in range(steps)]
    return float(np.mean([loss.numpy() for loss in losses]))


def read_every_step(step, steps):
    return sum(float(step()) for _ in range(steps)) / steps


def the_sum(step, steps, tf):
    return float(tf.add_n([step() for _ in range(steps)]))


def reduce_mean_of_a_list(step, steps, tf):  # previously rejected: the stand-in did not convert
    losses = []
    for _ in range(steps):
        losses.append(step())
    return float(tf.reduce_mean(losses))


def keras_ops_mean(step, steps):
    import keras

    return float(keras.ops.mean(keras.ops.stack([step() for _ in range(steps)])))


def numpy_accumulator(step, steps):  # NumPy scalar + tensor: TensorFlow adds it, no read
    total = np.float32(0.0)
    for _ in range(steps):
        total = total + step()
    return float(total) / steps


def test_mean_loss_right_answers_pass(tf):
    for answer in (lambda s, n: running_sum(s, n, tf), list_read_at_the_end,
                   lambda s, n: float(tf.add_n([s() for _ in range(n)])) / n,
                   lambda s, n: reduce_mean_of_a_list(s, n, tf), keras_ops_mean,
                   numpy_accumulator, lambda s, n: sum(s() for _ in range(n)).numpy().item() / n):
        got = verdict("02.3", answer)
        assert got.passed, got.message


@pytest.mark.parametrize(("answer", "says"), [
    (placeholder, "placeholder"),
    (read_every_step, "before the last step"),
    (lambda s, n: [s() for _ in range(n - 1)] and 3.5, "ran 5 step(s)"),
    (lambda s, n: sum(np.asarray(s()) for _ in range(n)) / n, "before the last step"),
    (lambda s, n: float(tf_module().add_n([s() for _ in range(n)])), "their mean is 15.17"),
    (lambda s, n: a_tensor(s, n, tf_module()), "not a Python float"),
    (lambda s, n: [loss := s() for _ in range(n)] and float(loss), "their mean is 15.17"),
])
def test_mean_loss_mistakes_are_caught(tf, answer, says):  # the sum, the last loss...
    got = verdict("02.3", answer)
    assert not got.passed
    assert says in got.message


def a_tensor(step, steps, tf):  # right mean, but a tensor: the caller's print would wait
    return tf.add_n([step() for _ in range(steps)]) / steps


def test_mean_loss_the_median_is_caught(tf):
    """Previously accepted: the losses were 1..6, whose median is their mean."""
    got = verdict("02.3", lambda s, n: float(np.median(tf.stack([s() for _ in range(n)]))))
    assert not got.passed and "their mean is 15.17" in got.message


def tf_module():
    return import_tensorflow()


def test_mean_loss_a_failed_try_leaves_nothing_patched(tf):
    """An answer that raises mid-loop: the read watch is undone, and the next try is judged
    on its own."""
    real_asarray = np.asarray

    def raises(step, steps):
        step()
        raise RuntimeError("typo")

    assert "RuntimeError" in verdict("02.3", raises).message
    assert np.asarray is real_asarray
    got = verdict("02.3", lambda s, n: running_sum(s, n, tf))
    assert got.passed, got.message


# 02.1, issue 50: answers that import or replace `sync_devices` themselves, then the solution

def imported_from_the_public_module(fn, repeats):
    """Previously it broke the kernel: the import under the check's patch left a module whose
    `sync_devices` was the check's stand-in, and every later 02.1 check raised."""
    from tensorflow.test.experimental import sync_devices

    fn()
    sync_devices()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync_devices()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def imported_without_warm_up(fn, repeats):
    from tensorflow.test.experimental import sync_devices

    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync_devices()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def imported_and_averaged(fn, repeats):
    from tensorflow.python.framework.test_util import sync_devices

    fn()
    sync_devices()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
        sync_devices()
    return (time.perf_counter() - start) / repeats


def replaces_sync_devices(fn, repeats):  # "quiet" it: nothing waits any more
    import tensorflow as tf

    tf.test.experimental.sync_devices = lambda: None
    return no_sync(lambda: (fn(), tf.test.experimental.sync_devices())[0], repeats)


def imported_into_the_module(fn, repeats):  # a module-level name, set from inside the answer
    global sync_from_inside
    from tensorflow.test.experimental import sync_devices as sync_from_inside

    return float(np.min([imported_from_the_public_module(fn, 1) for _ in range(repeats)]))


@pytest.mark.parametrize(("answer", "says"), [
    (imported_without_warm_up, "warm up"),
    (imported_and_averaged, "median"),
    (replaces_sync_devices, "nothing waited for it"),
    (imported_into_the_module, "not the best one (`min`"),
])
def test_timing_answers_that_import_sync_devices_leave_the_kernel_as_it_was(tf, answer, says):
    real = tf.test.experimental.sync_devices
    got = verdict("02.1", answer)
    assert not got.passed and says in got.message
    assert tf.test.experimental.sync_devices is real, "put back, whatever the answer did"
    assert exercises.REGISTRY["02.1"].check(imported_from_the_public_module) is None
    assert tf.test.experimental.sync_devices is real


def test_timing_with_sync_imported_from_the_public_module_is_right(tf):
    got = verdict("02.1", imported_from_the_public_module)
    assert got.passed, got.message


def test_timing_solution_passes_after_the_import_that_broke_the_kernel(tf):
    import sys  # noqa: PLC0415

    from solved import solution_functions  # noqa: PLC0415

    solution = solution_functions("02_gpu_vs_cpu_benchmark", tf=tf, np=np, time=time)
    for answer in (imported_from_the_public_module, solution["median_seconds"]):
        got = verdict("02.1", answer)
        assert got.passed, got.message
    real = tf.test.experimental.sync_devices
    assert sys.modules["tensorflow.test.experimental"].sync_devices is real


# 02.1, issue 50: judged against the check's own timer, run on the same stand-in just before and
# after the answer's, so that a loaded machine (every wait ends late) fails no right answer

@pytest.fixture
def loaded(monkeypatch):
    """A loaded machine: every sleep of the stand-in device's waits ends 30 ms late (the check
    once judged against fixed times: "One slow call out of 5 moved the result" to a right one)."""
    monkeypatch.setattr(exercises, "time", SimpleNamespace(
        perf_counter=time.perf_counter, sleep=lambda seconds: time.sleep(seconds + 0.03)))


def test_timing_right_answers_pass_on_a_loaded_machine(tf, loaded):
    for answer in (lambda fn, r: synced(fn, r, tf), read_result):
        got = verdict("02.1", answer)
        assert got.passed, got.message


@pytest.mark.parametrize(("answer", "says"), [
    (no_warm_up, "call it once to warm up"),
    (lambda fn, r: total_over_repeats(fn, r, tf_module()), "not the mean or the total"),
    (lambda fn, r: best_sample(fn, r, tf_module()), "not the best one"),
    (no_sync, "nothing waited for it"),
], ids=["no warm-up", "the total", "the best sample", "no sync"])
def test_timing_mistakes_are_caught_on_a_loaded_machine(tf, loaded, answer, says):
    got = verdict("02.1", answer)
    assert not got.passed and says in got.message, got.message


# 02.1, 02.3, issue 50: NumPy's functions bound by the learner's cell before the check runs (its
# top line, `from numpy import ...`). No check patches np.median or np.mean: 02.1 judges what the
# stand-in device measured; 02.3's reads are seen on the tensor itself (`_numpy`), whichever
# name NumPy was reached by.
BOUND_FIRST = """
from numpy import array as copy, asarray, mean, median
import time


def median_timer(fn, repeats):  # right
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - start)
    return float(median(samples))


def mean_timer(fn, repeats):  # wrong: the mean
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        float(asarray(fn()))
        samples.append(time.perf_counter() - start)
    return float(mean(samples))


def median_no_warm_up(fn, repeats):  # wrong: the first call timed
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        asarray(fn())
        samples.append(time.perf_counter() - start)
    return float(median(samples))


def mean_of_reads(step, steps):  # wrong: each loss read with asarray, every step
    return float(mean([asarray(step()) for _ in range(steps)]))


def median_of_reads(step, steps):  # wrong: read every step, and the median
    return float(median([float(asarray(step())) for _ in range(steps)]))


def array_every_step(step, steps):  # wrong: NumPy's `array`, bound as `copy`, every step
    return sum(copy(step()).item() for _ in range(steps)) / steps


def read_at_the_end(step, steps):  # right: read once, after the loop
    losses = [step() for _ in range(steps)]
    return float(mean(asarray(losses)))
"""


@pytest.mark.parametrize(("exercise", "name", "says"), [
    ("02.1", "median_timer", None), ("02.1", "mean_timer", "not the mean or the total"),
    ("02.1", "median_no_warm_up", "call it once to warm up"),
    ("02.3", "mean_of_reads", "before the last step"),
    ("02.3", "median_of_reads", "before the last step"),
    ("02.3", "array_every_step", "before the last step"), ("02.3", "read_at_the_end", None)])
def test_numpy_names_bound_before_the_check_change_no_verdict(tf, exercise, name, says):
    cell = {"sync": tf.test.experimental.sync_devices}
    exec(BOUND_FIRST, cell)
    got = verdict(exercise, cell[name])
    assert got.passed == (says is None) and (says or "") in got.message, got.message
    assert cell["asarray"] is np.asarray and cell["median"] is np.median, "bound before: kept"
