"""Checks for notebook 02's exercises (GPU vs CPU benchmark).

The timing checks never compare two real timings: they hand the learner's code a stand-in for
an accelerator whose costs are sleeps this module chooses (a slow first call, work that is only
finished when something waits for it), so the bounds below are fixed by those sleeps, with wide
margins.
"""

from __future__ import annotations

import contextlib
import numbers
import time

import numpy as np

from helpers.exercises import exercise, require

TRACE_S = 0.2  # the fake function's first call: tracing, on the host
WORK_S = 0.01  # the device work each call queues
SLOW_S = 0.2  # one call of the second run, whose device work is slower (an outlier)


def _wait_until(moment: float) -> None:
    while (left := moment - time.perf_counter()) > 0:
        time.sleep(min(left, 0.002))


class _Device:
    """A stand-in for an accelerator: each call of :meth:`fn` queues work and returns at once;
    the work is done only when something waits for it (a read of the result, or
    ``tf.test.experimental.sync_devices()``, which the check patches to wait here)."""

    def __init__(self, *, trace_s: float = 0.0, slow_call: int = 0, fast_call: int = 0):
        self.trace_s, self.slow_call, self.fast_call = trace_s, slow_call, fast_call
        self.calls = 0
        self.free_at = 0.0  # when the queued work is finished

    def fn(self):
        self.calls += 1
        if self.calls == 1 and self.trace_s:
            _wait_until(time.perf_counter() + self.trace_s)  # tracing: host work, synchronous
        work = (SLOW_S if self.calls == self.slow_call
                else WORK_S / 10 if self.calls == self.fast_call else WORK_S)
        self.free_at = max(time.perf_counter(), self.free_at) + work
        return _Queued(self, self.free_at)

    def sync(self) -> None:
        _wait_until(self.free_at)


class _Queued:
    """A result whose value exists once its device work is done: reading it waits."""

    def __init__(self, device: _Device, done_at: float):
        self._device, self._done_at = device, done_at

    def numpy(self):
        _wait_until(self._done_at)
        return 0.0

    def __float__(self):
        return float(self.numpy())

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype=dtype)

    def __repr__(self):
        return f"<result {self.numpy()}>"


@contextlib.contextmanager
def _syncing_with(device: _Device, learners=None):
    """``tf.test.experimental.sync_devices()`` waits for ``device`` while this block runs, and
    so does any name the learner's code bound to it beforehand (``sync =
    tf.test.experimental.sync_devices`` at the top of the cell): the globals of ``learners``."""
    import tensorflow as tf

    namespace = tf.test.experimental
    had = hasattr(namespace, "sync_devices")
    original = getattr(namespace, "sync_devices", None)
    space = getattr(learners, "__globals__", {})
    bound = [name for name, value in space.items() if original is not None and value is original]
    namespace.sync_devices = device.sync
    for name in bound:
        space[name] = device.sync
    try:
        yield
    finally:
        for name in bound:
            space[name] = original
        if had:
            namespace.sync_devices = original
        else:
            del namespace.sync_devices


def _seconds(timer, device: _Device, repeats: int):
    with _syncing_with(device, timer):
        result = timer(device.fn, repeats)
    require(result)
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        return None, (f"It returned a {type(result).__name__} ({result!r}), not a number of "
                      "seconds.")
    return float(result), None


@exercise("02.1", "time any call correctly",
          hint="Call `fn()` once before timing (the first call traces), then for each of "
               "`repeats` samples: start the clock, call `fn()`, wait with "
               "`tf.test.experimental.sync_devices()` (or read the result), stop the clock; "
               "return `float(np.median(samples))`.",
          right="It leaves the first call out, waits for the device in every sample, and one "
                "slow sample does not move it.")
def median_seconds(timer) -> str | None:
    # First run: the first call is slow (tracing), the work is done only when waited for.
    device = _Device(trace_s=TRACE_S)
    seconds, problem = _seconds(timer, device, 2)
    if problem:
        return problem
    if device.calls < 3:
        return (f"With repeats=2 it called `fn` {device.calls} time(s): call it once to warm up, "
                "then time 2 more calls.")
    if seconds < WORK_S / 2:
        return (f"It measured {seconds * 1e3:.2f} ms for calls whose device work takes "
                f"{WORK_S * 1e3:.0f} ms: the clock stopped before the device had finished "
                "(nothing waited for it).")
    if seconds > 1.0:
        return f"It returned {seconds:.4g}: that is more than any call took; return seconds."
    if seconds > TRACE_S / 4:
        return (f"It measured {seconds * 1e3:.0f} ms for calls of {WORK_S * 1e3:.0f} ms: the "
                f"first call ({TRACE_S * 1e3:.0f} ms of tracing) is in the samples; warm up "
                "first.")
    # Second run: one of the timed calls is slow; the median must not move much.
    device = _Device(slow_call=3)
    seconds, problem = _seconds(timer, device, 5)
    if problem:
        return problem
    if seconds > WORK_S + (SLOW_S - WORK_S) / 10:  # half-way to what the mean of 5 would be
        return (f"One slow call out of 5 moved the result to {seconds * 1e3:.0f} ms (the others "
                f"take {WORK_S * 1e3:.0f} ms): time each call on its own and take the median, "
                "not the mean or the total.")
    # Third run: one of the timed calls is fast (a cached result, say): the median must not
    # move either, where the best sample (`min`, timeit's way) would
    device = _Device(fast_call=4)
    seconds, problem = _seconds(timer, device, 5)
    if problem:
        return problem
    if seconds < WORK_S * 0.6:
        return (f"One fast call out of 5 moved the result to {seconds * 1e3:.1f} ms (the others "
                f"take {WORK_S * 1e3:.0f} ms): take the median of the samples, not the best "
                "one (`min`, as timeit reports).")
    return None


_POLICY = {"gpu": "mixed_float16", "cpu": "mixed_bfloat16", "tpu": "mixed_bfloat16"}
# what the global policy is set to before each call, so that "restore" is seen to restore
_BEFORE = {"gpu": "mixed_bfloat16", "cpu": "mixed_float16", "tpu": "float32"}


def _dtype(value) -> str:
    import keras

    return keras.backend.standardize_dtype(value.dtype)


def _check_mixed(model, kind: str, before: str, now: str) -> str | None:
    import keras

    wanted = _POLICY[kind]
    if not isinstance(model, keras.Model):
        return f"For {kind!r} it returned a {type(model).__name__}, not a Keras model."
    if now != before:
        return (f"After building for {kind!r} the global policy is {now!r}; it was {before!r} "
                "before your call: keep `global_policy()` first and set it back (in `finally`).")
    # the output's dtype and shape, worked out without running a kernel
    try:
        out = model.compute_output_spec(keras.KerasTensor((2, 784), dtype="float32"))
    except Exception as error:  # any shape mismatch: say it in one line
        return f"It does not take 784 inputs: {type(error).__name__}: {str(error)[:120]}"
    if not model.weights:  # a Sequential without keras.Input: build it for 784 inputs
        model.build((None, 784))
    dense = [layer for layer in model.layers if getattr(layer, "kernel", None) is not None]
    if not dense:
        return "The model has no layer with weights (Dense): build the classifier."
    hidden = dense[0]
    activation = getattr(getattr(hidden, "activation", None), "__name__", "")
    if len(dense) > 1 and (getattr(hidden, "units", None) != 256 or activation != "relu"):
        return (f"Its hidden layer is Dense({getattr(hidden, 'units', '?')}, "
                f"activation={activation!r}): the task's model has Dense(256, "
                "activation=\"relu\"), as in \"Reading a value every step\".")
    kept = {_dtype(w) for w in model.weights}
    if kept != {"float32"}:
        return (f"Its weights are {sorted(kept)}: mixed precision keeps them in float32 and "
                "computes in 16 bits (a `mixed_` policy, not a plain 16-bit one).")
    first = dense[0].dtype_policy.name
    if first != wanted:
        return (f"For {kind!r} its first layer's policy is {first!r}, not {wanted!r}: set the "
                "global policy before building the layers.")
    if tuple(out.shape) != (2, 10):
        return f"For 2 inputs of 784 values it gave shape {tuple(out.shape)}, not (2, 10)."
    if _dtype(out) != "float32":
        return (f"Its output is {_dtype(out)}: give the last layer `dtype=\"float32\"`, so that "
                "the softmax and the loss stay in float32.")
    return None


@exercise("02.2", "build a model in mixed precision",
          hint="`previous = keras.mixed_precision.global_policy()`, then "
               "`set_global_policy(\"mixed_float16\" if kind == \"gpu\" else "
               "\"mixed_bfloat16\")`, build, give the last `Dense` `dtype=\"float32\"`, and "
               "`set_global_policy(previous)` in a `finally:` block.",
          right="Each device gets its 16-bit policy, the weights stay float32, the output is "
                "float32, and the global policy is as you found it.")
def mixed_model(build) -> str | None:
    import keras

    original = keras.mixed_precision.global_policy()
    try:
        for kind in ("gpu", "cpu", "tpu"):
            keras.mixed_precision.set_global_policy(_BEFORE[kind])
            model = build(kind)
            require(model)
            now = keras.mixed_precision.global_policy().name
            if problem := _check_mixed(model, kind, _BEFORE[kind], now):
                return problem
    finally:
        keras.mixed_precision.set_global_policy(original)
    return None


class _Loss:
    """A stand-in for a loss tensor on the device: TensorFlow may compute with it (no read),
    but its value reaches Python only by a read, which the check records."""

    __array_priority__ = 100  # as TensorFlow's tensors: NumPy hands `np_value + loss` to us

    def __init__(self, value: float, log: list):
        self._value, self._log = value, log

    def _tensor(self):
        import tensorflow as tf

        return tf.constant(self._value, tf.float32)

    def __tf_tensor__(self, dtype=None, name=None):  # TensorFlow ops take it: no read
        import tensorflow as tf

        return tf.convert_to_tensor(self._tensor(), dtype=dtype, name=name)

    def numpy(self):
        self._log.append("read")
        return self._tensor().numpy()

    def __float__(self):
        return float(self.numpy())

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype=dtype)

    def __repr__(self):
        return repr(self.numpy())

    def __format__(self, spec):
        return format(float(self), spec)

    def __add__(self, other):
        return self._tensor() + other

    def __radd__(self, other):
        return other + self._tensor()

    def __truediv__(self, other):
        return self._tensor() / other

    def __mul__(self, other):
        return self._tensor() * other

    __rmul__ = __mul__


@exercise("02.3", "average the loss without stalling",
          hint="Keep the losses as tensors (`total = total + step()`, or a list and "
               "`tf.add_n`), and read once, after the loop: `float(total) / steps`.",
          right="It reads the losses only after the last step: the device never waits for "
                "Python.")
def mean_loss(average) -> str | None:
    steps, log = 6, []

    def step():  # a training step: queues its work and returns the loss, a tensor
        log.append("step")
        return _Loss(float(log.count("step")), log)  # losses 1, 2, ..., 6

    result = average(step, steps)
    require(result)
    ran = log.count("step")
    if ran != steps:
        return f"It ran {ran} step(s) for steps={steps}."
    last = len(log) - 1 - log[::-1].index("step")
    early = log[:last].count("read")
    if early:
        return (f"It read {early} loss value(s) before the last step: each read makes Python "
                "wait for the device, and the device then waits for Python. Read after the loop.")
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        kind = "tensor" if hasattr(result, "numpy") or hasattr(result, "dtype") else "value"
        return (f"It returned a {type(result).__name__} ({kind}), not a Python float: read the "
                "total once, after the loop, with `float(...)`.")
    value = float(result)
    expected = (steps + 1) / 2
    if abs(value - expected) > 1e-5:
        return f"It returned {value:g} for losses 1 to {steps}: their mean is {expected:g}."
    return None
