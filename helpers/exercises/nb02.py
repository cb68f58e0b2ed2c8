"""Checks for notebook 02's exercises (GPU vs CPU benchmark), timing on a stand-in device."""

import numbers
import sys
import timeit

import numpy as np

from helpers.exercises import Device, exercise, is_number, keras_as_found, patched, require


def _seconds(timer, device: Device, repeats: int) -> float:
    """What ``timer`` measures on ``device``: TensorFlow's own ``sync_devices`` ends by calling
    ``context.async_wait``, which waits for ``device`` here, however the answer reached it."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import test_util

    real = test_util.sync_devices  # where a cell or an attempt replaced it: put back
    copies = [m for name, m in list(sys.modules.items())
              if name.endswith("test.experimental") and hasattr(m, "sync_devices")]
    if changed := [m for m in copies if m.sync_devices is not real]:
        print("tf.test.experimental.sync_devices had been replaced in this kernel (by a cell "
              "or an earlier attempt): the check put TensorFlow's own back.")
    for module in changed:
        module.sync_devices = real
    kept = {(m, "sync_devices"): real for m in copies}  # and kept, whatever the answer does
    with patched({(context, "async_wait"): device.sync, **kept}):
        result = timer(device.call, repeats)
    require(result)
    if not is_number(result, numbers.Real):  # said as "what your code returned could not be..."
        raise TypeError(f"It returned a {type(result).__name__} ({result!r}), not a number.")
    return float(result)


@exercise("02.1", "time any call correctly",
          where="`time_calls` under \"Timing done wrong, and done right\"",
          hint="Call `fn()` once before timing (the first call traces), then for each of "
               "`repeats` samples: start the clock, call `fn()`, wait with "
               "`tf.test.experimental.sync_devices()` (or read the result), stop the clock; "
               "return `float(np.median(samples))`.",
          right="It leaves the first call out, waits for the device in every sample, and takes "
                "a median, which one slow sample does not move from three samples on.")
def median_seconds(timer) -> str | None:
    trace_s, work_s, slow_s = 0.2, 0.01, 0.2  # the first call's tracing, a call's work, an outlier
    ours = [_median_s(Device(work_s), 3)]  # the check's own timer, before and after each of theirs

    def theirs(device: Device, repeats: int) -> tuple[float, float, float]:
        seconds = _seconds(timer, device, repeats)  # then the range of ours around it
        ours.append(_median_s(Device(work_s), 3))
        return seconds, min(ours[-2:]), max(ours[-2:])

    for _ in range(2):  # a loaded machine can stretch a sample once; a timed first call stays
        seconds, low, high = theirs(device := Device(work_s, trace_s=trace_s), 3)
        if seconds <= high + (trace_s - work_s) / 4:
            break
    if device.calls < 4:
        return (f"With repeats=3 it called `fn` {device.calls} time(s): call it once to warm up, "
                "then time 3 more calls.")
    if seconds < low / 4:  # no wait: a dispatch, far below (a total over 2 calls: about half)
        return (f"It measured {seconds * 1e3:.2f} ms for calls whose device work takes "
                f"{low * 1e3:.0f} ms: the clock stopped before the device had finished "
                "(nothing waited for it).")
    if seconds > 1.0:
        return f"It returned {seconds:.4g}: that is more than any call took; return seconds."
    if seconds > high + (trace_s - work_s) / 4:
        return (f"It measured {seconds * 1e3:.0f} ms for calls of {high * 1e3:.0f} ms: the first "
                f"call ({trace_s * 1e3:.0f} ms of tracing) is in the samples; warm up first.")
    slow_s = max(slow_s, 30 * high)  # a tenth of it, 3 steady calls: more than a load varies
    for _ in range(2):  # a loaded machine can stretch every call once; a mean moves it each time
        # one slow call, and one fast one (a cached result, say: no work, no wait to stretch)
        seconds, low, high = theirs(Device(work_s, costs={3: slow_s, 4: 0.0}), 5)
        if seconds <= high + (slow_s - work_s) / 10:  # a tenth of the outlier
            break
    else:
        return (f"One slow call out of 5 moved the result to {seconds * 1e3:.0f} ms (the others "
                f"take {high * 1e3:.0f} ms): time each call on its own and take the median, "
                "not the mean or the total.")
    if seconds < low * 0.6:  # the fast call is the best sample (timeit's `min`)
        return (f"One fast call out of 5 moved the result to {seconds * 1e3:.1f} ms (the others "
                f"take {low * 1e3:.0f} ms): take the median of the samples, not the best "
                "one (`min`, as timeit reports).")
    return None


def _median_s(device: Device, repeats: int) -> float:  # a right answer: warm up, wait, median
    float(device.call())
    return float(np.median(timeit.repeat(lambda: float(device.call()), number=1, repeat=repeats)))


_POLICY = {"gpu": "mixed_float16", "cpu": "mixed_bfloat16", "tpu": "mixed_bfloat16"}
# the global policy set before each call, so that "restore" is seen to restore
_BEFORE = {"gpu": "mixed_bfloat16", "cpu": "mixed_float16", "tpu": "float32"}


def _check_mixed(model, kind: str, before: str) -> str | None:  # right after build(kind)
    import keras

    dtype = keras.backend.standardize_dtype
    if not isinstance(model, keras.Model):
        return f"For {kind!r} it returned a {type(model).__name__}, not a Keras model."
    if (now := keras.mixed_precision.global_policy().name) != before:
        return (f"After building for {kind!r} the global policy is {now!r}; it was {before!r} "
                "before your call: keep `global_policy()` first and set it back (in `finally`).")
    try:  # the output's dtype and shape, worked out without running a kernel
        out = model.compute_output_spec(keras.KerasTensor((2, 784), dtype="float32"))
    except Exception as error:  # any shape mismatch: say it in one line
        return f"It does not take 784 inputs: {type(error).__name__}: {str(error)[:120]}"
    if not model.weights:  # a Sequential without keras.Input: build it for 784 inputs
        model.build((None, 784))
    dense = [layer for layer in model.layers if getattr(layer, "kernel", None) is not None]
    if not dense:
        return "The model has no layer with weights (Dense): build the classifier."
    units = getattr(dense[0], "units", "?")
    activation = getattr(getattr(dense[0], "activation", None), "__name__", "")
    if len(dense) > 1 and (units != 256 or activation != "relu"):
        return (f"Its hidden layer is Dense({units}, activation={activation!r}): the task's model "
                "has Dense(256, activation=\"relu\"), as in \"Reading a value every step\".")
    if (kept := {dtype(w.dtype) for w in model.weights}) != {"float32"}:
        return (f"Its weights are {sorted(kept)}: mixed precision keeps them in float32 and "
                "computes in 16 bits (a `mixed_` policy, not a plain 16-bit one).")
    if (first := dense[0].dtype_policy.name) != _POLICY[kind]:
        return (f"For {kind!r} its first layer's policy is {first!r}, not {_POLICY[kind]!r}: set "
                "the global policy before building the layers.")
    if tuple(out.shape) != (2, 10):
        return f"For 2 inputs of 784 values it gave shape {tuple(out.shape)}, not (2, 10)."
    if dtype(out.dtype) != "float32":
        return (f"Its output is {dtype(out.dtype)}: give the last layer `dtype=\"float32\"`, so "
                "that the softmax and the loss stay in float32.")
    return None


@exercise("02.2", "build a model in mixed precision",
          where="`build` under \"Training: the same code on the CPU and the accelerator\"",
          hint="`previous = keras.mixed_precision.global_policy()`, then "
               "`set_global_policy(\"mixed_float16\" if kind == \"gpu\" else "
               "\"mixed_bfloat16\")`, build, give the last `Dense` `dtype=\"float32\"`, and "
               "`set_global_policy(previous)` in a `finally:` block.",
          right="Each device gets its 16-bit policy, the weights stay float32, the output is "
                "float32, and the global policy is as you found it.")
def mixed_model(build) -> str | None:
    import keras

    with keras_as_found(keras):
        for kind in ("gpu", "cpu", "tpu"):
            keras.mixed_precision.set_global_policy(_BEFORE[kind])
            model = build(kind)
            require(model)
            if problem := _check_mixed(model, kind, _BEFORE[kind]):
                return problem
    return None


def reads(on_read, *answers):
    """While it lasts, ``on_read(value)`` runs whenever Python reads a real tensor's value, also
    through NumPy's functions bound before under other names (``from numpy import asarray``)."""
    import tensorflow as tf
    from tensorflow.python.framework import ops

    def logged(real, check):
        def read(value, *args, **kwargs):
            if not check or any(isinstance(v, tf.Tensor) for v in (value, *(
                    value if isinstance(value, list | tuple) else ()))):
                on_read(value)
            return real(value, *args, **kwargs)
        return read

    base = ops._EagerTensorBase
    return patched({(base, "_numpy"): logged(base._numpy, False),
                    (np, "asarray"): logged(np.asarray, True),
                    (np, "array"): logged(np.array, True)},
                   *(getattr(answer, "__globals__", {}) for answer in answers))


@exercise("02.3", "average the loss without stalling",
          where="`read_at_the_end` under \"Reading a value every step stalls the device\"",
          hint="Keep the losses as tensors (`total = total + step()`, or a list and "
               "`tf.add_n`), and read once, after the loop: `float(total) / steps`.",
          right="It reads the losses only after the last step: the device never waits for Python.")
def mean_loss(average) -> str | None:
    import tensorflow as tf

    steps, log = 6, []
    losses = [float(i * i) for i in range(1, steps + 1)]  # mean 15.17, median 12.5, last 36

    def step():  # a training step: queues its work and returns the loss, a tensor
        log.append("step")
        return tf.constant(losses[(log.count("step") - 1) % steps])

    with reads(lambda _: log.append("read"), average):
        result = average(step, steps)
    require(result)
    if (ran := log.count("step")) != steps:
        return f"It ran {ran} step(s) for steps={steps}."
    if early := log[:len(log) - 1 - log[::-1].index("step")].count("read"):
        return (f"It read {early} loss value(s) before the last step: each read makes Python wait "
                "for the device, and the device then waits for Python. Read after the loop.")
    if not is_number(result, numbers.Real):
        kind = "tensor" if hasattr(result, "numpy") or hasattr(result, "dtype") else "value"
        return (f"It returned a {type(result).__name__} ({kind}), not a Python float: read the "
                "total once, after the loop, with `float(...)`.")
    if abs(float(result) - (mean := sum(losses) / steps)) > 1e-4:
        return f"It returned {float(result):g} for losses {losses}: their mean is {mean:.4g}."
    return None
