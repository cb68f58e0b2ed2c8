import inspect
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import data, devices, errors, models, out_of_memory
from helpers.errors import LateConfigurationError


def SET_GPU_MEMORY(gpus, limit_mb=0):  # noqa: N802  (notebook 07's, which the child gets as source)
    from helpers.lessons.nb07 import set_gpu_memory

    set_gpu_memory(gpus, limit_mb)


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
    result = out_of_memory.find_max_batch(try_batch, start=8, margin=0.9, multiple=8)
    assert result.largest_ok == 96  # 128 failed, then 96 fit and 112, 104 did not
    assert result.batch_size == 80  # 90% of 96, down to a multiple of 8
    assert [b for b, r in result.tries if r == "OOM"] == [128, 112, 104]


def test_search_survives_ooms_in_a_row_and_training_works_afterwards(tf):
    import keras

    try_batch, _ = injected_oom(9)
    result = out_of_memory.find_max_batch(try_batch, start=8, margin=1.0, multiple=1)
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
        out_of_memory.find_max_batch(broken)


def test_nothing_fits(tf):
    try_batch, _ = injected_oom(4)
    with pytest.raises(MemoryError, match="even batch_size=8"):
        out_of_memory.find_max_batch(try_batch, start=8)


def test_gradient_accumulation_equals_the_large_batch(tf):
    """Notebook 07's own accumulation loop (its #@save cell) gives the full batch's gradient."""
    import keras

    from helpers.lessons import nb07 as lesson

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
        accumulated = lesson.accumulated_gradients(model, loss_fn, x, y, micro)
        for a, b in zip(full, accumulated, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_a_late_device_setting_raises_in_tensorflow_and_gets_the_clear_message(tf):
    """What notebook 07 shows on the CPU: TensorFlow refuses a new logical-device split once it
    has started (a real RuntimeError, not a silent return), and the course's message says what
    to do."""
    tf.constant(1.0) + 1  # TensorFlow has started
    cpu = tf.config.list_physical_devices("CPU")[0]
    count = len(tf.config.get_logical_device_configuration(cpu) or [None]) + 1  # not in force
    split = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
    with pytest.raises(RuntimeError, match="cannot be modified after being initialized") as error:
        tf.config.set_logical_device_configuration(cpu, split)
    late = out_of_memory.late_error(error.value, f"{count} logical devices")
    assert isinstance(late, LateConfigurationError)
    assert str(late).startswith(f"Asked for {count} logical devices, too late.")
    assert "Restart the kernel" in str(late)
    switch = ValueError("Cannot set memory growth on device when virtual devices configured")
    assert "cannot switch a GPU" in str(out_of_memory.late_error(switch, "memory growth"))


def test_measurements_on_the_cpu(tf):
    assert out_of_memory.peak_rss_mb() > 10
    assert out_of_memory.current_rss_mb() > 10


def test_gpu_memory_in_use_comes_from_nvidia_smi(monkeypatch):
    monkeypatch.setattr(devices, "nvidia_smi", lambda: [{"memory_used_mib": 1234}])
    assert out_of_memory.gpu_used_mb() == 1234
    monkeypatch.setattr(devices, "nvidia_smi", lambda: [])
    assert out_of_memory.gpu_used_mb() is None


def test_child_process_trainer_returns_results_and_exits(tf):
    images = data.load("digits", limit=64, verbose=False)
    result = out_of_memory.train_in_child("mnist_cnn", images.x_train, images.y_train, 32, steps=2,
                                           memory_setup=SET_GPU_MEMORY)
    assert result["exit_code"] == 0  # the process is gone, and its memory with it
    assert np.isfinite(result["history"]["loss"][0]) and result["step_rss_mb"] >= 0


def test_child_errors_reach_the_parent(tf):
    with pytest.raises(RuntimeError, match="the child process failed: KeyError"):
        out_of_memory.train_in_child("no_such_model", np.zeros((4, 28, 28, 1)), np.zeros(4), 2,
                                     memory_setup=SET_GPU_MEMORY)


def test_cpu_budget_search_uses_the_same_search(tf):
    calls = []

    def fake_child(model, x, y, batch, steps, gpu_limit_mb, memory_setup):
        calls.append((batch, len(x)))
        return {"step_rss_mb": batch * 1.0, "gpu_peak_mb": None}  # 1 MiB per example

    original = out_of_memory.train_in_child
    out_of_memory.train_in_child = fake_child
    try:
        try_batch = out_of_memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), 40,
                                               memory_setup=SET_GPU_MEMORY)
        result = out_of_memory.find_max_batch(try_batch, start=8, margin=1.0, multiple=1)
    finally:
        out_of_memory.train_in_child = original
    assert result.largest_ok == 40 and calls[0] == (8, 16)  # two steps' worth of examples


def test_estimate_grows_with_the_batch_through_activations(tf):
    from helpers.lessons import nb07 as lesson  # notebook 07's cell (imports TF)

    small, large = (lesson.estimate_mb(models.mnist_cnn(), b) for b in (32, 256))
    assert small["parameters"] == large["parameters"] > 0
    assert large["activations"] == pytest.approx(8 * small["activations"])
    assert small["optimizer slots"] == pytest.approx(2 * small["gradients"])
    frozen = models.mnist_cnn()
    for layer in frozen.layers[:3]:  # freeze the rescaling and both convolutions
        layer.trainable = False
    cold = lesson.estimate_mb(frozen, 32)
    assert cold["parameters"] == pytest.approx(small["parameters"])  # weights still held
    assert cold["gradients"] < small["gradients"] and cold["total"] < small["total"]


def test_the_child_limits_each_gpu_before_its_first_op(tf, monkeypatch):
    """The child runs the notebook's set_gpu_memory from its source, as the cell defined it."""
    from helpers.lessons.nb07 import set_gpu_memory

    SETUP = {"memory_setup": ("set_gpu_memory", inspect.getsource(set_gpu_memory))}  # noqa: N806
    calls = []
    monkeypatch.setattr(
        tf.config, "set_logical_device_configuration", lambda gpu, cfg: calls.append((gpu, cfg))
    )
    monkeypatch.setattr(
        tf.config.experimental, "set_memory_growth", lambda gpu, on: calls.append((gpu, on))
    )
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["gpu0", "gpu1"])
    out_of_memory.child_memory_setup({"gpu_limit_mb": 512, **SETUP})
    assert [gpu for gpu, _ in calls] == ["gpu0", "gpu1"]
    assert calls[0][1][0].memory_limit == 512
    calls.clear()
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["gpu0"])
    out_of_memory.child_memory_setup(SETUP)  # no limit: memory growth
    assert calls == [("gpu0", True)]


def test_on_a_gpu_the_budget_is_the_childs_limit_and_real_ooms_count(tf, monkeypatch):
    limits = []

    def fake_child(model, x, y, batch, steps, gpu_limit_mb, memory_setup):
        limits.append(gpu_limit_mb)
        if batch > 24:  # what the child reports when TF runs out of its limited memory
            raise errors.ChildOutOfMemory("ResourceExhaustedError: OOM when allocating tensor")
        return {"step_rss_mb": 0.0, "gpu_peak_mb": batch * 1.0}

    monkeypatch.setattr(out_of_memory, "train_in_child", fake_child)
    search = out_of_memory.find_max_batch(
        out_of_memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), 100,
                                   memory_setup=SET_GPU_MEMORY),
        start=8,
        margin=1.0,
        multiple=1,
    )
    assert search.largest_ok == 24 and search.ooms >= 2
    assert set(limits) == {100}
    out_of_memory.budget_trial("mnist_cnn", np.zeros((10, 2)), np.zeros(10), float("inf"),
                               memory_setup=SET_GPU_MEMORY)(8)
    assert limits[-1] is None  # no budget: no limit, memory grows as needed


# -- dead children, idempotent set-up (issue 14) -------------------------------------------


def gone(pid: int) -> bool:
    """True when no process ``pid`` is left (psutil may not be installed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too (not yet reaped)
        return f.read().split(")")[-1].split()[0] == "Z"


def test_a_child_killed_by_the_oom_killer_counts_as_out_of_memory_at_once():
    # timeout=300: a parent that waited for the reply instead of the process would end in
    # ChildTimeout, not in ChildOutOfMemory
    with pytest.raises(errors.ChildOutOfMemory, match="SIGKILL") as error:
        out_of_memory.run_in_child(signal.raise_signal, signal.SIGKILL, timeout=300)
    assert gone(error.value.pid)


def test_a_crashed_child_is_a_clear_error_not_an_oom():
    with pytest.raises(errors.ChildDied, match="SIGSEGV") as error:
        out_of_memory.run_in_child(signal.raise_signal, signal.SIGSEGV, timeout=300)
    assert not isinstance(error.value, MemoryError) and error.value.exitcode == -signal.SIGSEGV
    assert gone(error.value.pid)
    with pytest.raises(errors.ChildDied, match="exited with code 3") as error:
        out_of_memory.run_in_child(__import__("os")._exit, 3, timeout=300)
    assert gone(error.value.pid)


def test_a_silent_child_is_killed_at_the_timeout():
    with pytest.raises(errors.ChildTimeout, match="within 1 s") as error:
        out_of_memory.run_in_child(time.sleep, 120, timeout=1)
    assert gone(error.value.pid)


def test_a_child_reports_its_result_and_exits():
    result = out_of_memory.run_in_child(dict, {"answer": 42})
    assert result["answer"] == 42 and result["exit_code"] == 0 and gone(result["pid"])
    with pytest.raises(RuntimeError, match="the child process failed: ValueError"):
        out_of_memory.run_in_child(int, "not a number")


def test_the_batch_search_takes_an_oom_killed_child_for_too_big():
    def try_batch(batch):
        if batch > 16:  # the kernel's OOM killer ends the child: SIGKILL, no report
            out_of_memory.run_in_child(signal.raise_signal, signal.SIGKILL)

    search = out_of_memory.find_max_batch(try_batch, start=8, limit=32, margin=1.0, multiple=1)
    assert search.largest_ok == 16 and search.ooms >= 1


def test_a_spawned_childs_peak_memory_is_its_own_not_the_parents():
    """ru_maxrss of a fork+exec child starts at the parent's size: in a second "Run all" of
    notebook 07 the parent had grown, and every measurement read 0 MiB."""
    ballast = np.ones(400 * 2**20 // 8)  # the parent grows by 400 MiB
    parent = out_of_memory.peak_rss_mb()
    child = out_of_memory.run_in_child(_peak_in_child, None)
    del ballast
    assert parent > 400 and child["peak"] < parent - 300, (parent, child)


def _environment_variable(name):
    return os.environ.get(name)


def test_a_child_gets_the_callers_environment_as_it_is_now():
    """The fork server started with the environment of its time; a child must see a variable
    set since (notebook 07 sets TF_GPU_ALLOCATOR for the next child) and not one unset since."""
    out_of_memory.run_in_child(dict, {})  # the fork server is running from here on
    os.environ["COURSE_TEST_SET_LATE"] = "cuda_malloc_async"
    try:
        assert out_of_memory.run_in_child(_environment_variable, "COURSE_TEST_SET_LATE") == (
            "cuda_malloc_async")
    finally:
        del os.environ["COURSE_TEST_SET_LATE"]
    assert out_of_memory.run_in_child(_environment_variable, "COURSE_TEST_SET_LATE") is None


def _peak_in_child(_):
    return {"peak": out_of_memory.peak_rss_mb()}


def _answer_later(task):
    Path(task["pid_file"]).write_text(str(os.getpid()))
    time.sleep(task["sleep"])
    return {"answer": task["answer"]}


def test_an_interrupted_call_leaves_no_reply_for_the_next_one(tmp_path):
    """A learner's interrupt (KeyboardInterrupt) in the middle of a call: its child is gone,
    and the next call gets its own answer, never the interrupted one's (issue 22: a shared
    pipe answered each call with the previous reply). Each call has a pipe of its own."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    pid_file, main = tmp_path / "pid", threading.main_thread().ident

    def interrupt_once_started():  # a real signal, so that the parent's wait wakes up
        while not pid_file.exists():
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        threading.Thread(target=interrupt_once_started, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            out_of_memory.run_in_child(
                _answer_later, {"answer": "first", "sleep": 30, "pid_file": str(pid_file)})
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert pid_file.exists() and gone(int(pid_file.read_text())), "the child outlived the call"
    second = {"answer": "second", "sleep": 0, "pid_file": str(tmp_path / "pid2")}
    assert out_of_memory.run_in_child(_answer_later, second)["answer"] == "second"


class FakeConfig:
    """``tf.config``'s memory settings, as TensorFlow keeps them, started or not."""

    def __init__(self, started=False):
        self.growth, self.virtual, self.started = {}, {}, started

    def get_memory_growth(self, gpu):
        return self.growth.get(gpu)

    def get_logical_device_configuration(self, gpu):
        return self.virtual.get(gpu)

    def set_memory_growth(self, gpu, on):
        if gpu in self.virtual:
            raise ValueError("Cannot set memory growth on device when virtual devices configured")
        if self.started and self.growth.get(gpu) != on:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.growth[gpu] = on

    def set_logical_device_configuration(self, gpu, devices):
        if self.started and self.virtual.get(gpu) != devices:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.virtual[gpu] = devices


@pytest.fixture
def fake_config(tf, monkeypatch):
    fake = FakeConfig()
    for name in ("get_logical_device_configuration", "set_logical_device_configuration"):
        monkeypatch.setattr(tf.config, name, getattr(fake, name))
    for name in ("get_memory_growth", "set_memory_growth"):
        monkeypatch.setattr(tf.config.experimental, name, getattr(fake, name))
    return fake


def test_the_same_gpu_setting_again_is_silent_and_another_one_too_late(fake_config):
    """Notebook 07's set_gpu_memory under TensorFlow's rules: the same growth again (a second
    "Run all") returns; a limit after the start is TF's RuntimeError, which the course words."""
    from helpers.lessons import nb07 as lesson

    gpus = ["gpu0", "gpu1"]
    lesson.set_gpu_memory(gpus)
    fake_config.started = True  # TF's first op ran
    lesson.set_gpu_memory(gpus)
    assert fake_config.growth == {"gpu0": True, "gpu1": True} and not fake_config.virtual
    with pytest.raises(RuntimeError, match="after being initialized") as error:
        lesson.set_gpu_memory(gpus, limit_mb=512)
    late = str(out_of_memory.late_error(error.value, "a 512 MiB limit"))
    assert late.startswith("Asked for a 512 MiB limit, too late.") and "Restart the kernel" in late


def test_the_same_gpu_limit_again_is_silent_and_growth_on_it_is_refused(fake_config):
    from helpers.lessons import nb07 as lesson

    lesson.set_gpu_memory(["gpu0"], limit_mb=256)
    fake_config.started = True
    lesson.set_gpu_memory(["gpu0"], limit_mb=256)
    assert fake_config.virtual["gpu0"][0].memory_limit == 256 and not fake_config.growth
    with pytest.raises(ValueError, match="virtual devices configured") as error:
        lesson.set_gpu_memory(["gpu0"])  # growth on top of a limit: TF refuses, started or not
    assert "cannot switch" in str(out_of_memory.late_error(error.value, "memory growth"))



def _side_by_side_in_child(_):
    import tensorflow as tf

    steps = {"small": tf.function(lambda: tf.reduce_sum(tf.random.uniform([2**8]))),
             "4 MiB": tf.function(lambda: tf.reduce_sum(tf.random.uniform([2**20])))}
    runs = out_of_memory.side_by_side(steps)
    return {"runs": runs, "rows": list(out_of_memory.side_by_side_rows(runs))}


def test_side_by_side_reads_each_steps_own_peak_and_judges_it_round_by_round(monkeypatch):
    """Notebook 07's remedies table: the allocator's peak per call (reset before each; on a CPU,
    the BFC allocator the environment asks for), five rounds kept, each against the first step."""
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "true")  # read at the child's first op
    result = out_of_memory.run_in_child(_side_by_side_in_child, None)
    runs, rows = result["runs"], result["rows"]
    assert [len(run[key]) for run in runs.values() for key in ("s", "mib")] == [5] * 4
    assert min(runs["4 MiB"]["mib"]) >= 4 > max(runs["small"]["mib"]), runs
    assert [row[0] for row in rows] == ["small", "4 MiB"] and rows[0][2] == "-"
    assert rows[1][2].endswith("more in every round"), rows
