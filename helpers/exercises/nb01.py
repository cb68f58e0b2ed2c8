"""Checks for notebook 01's exercises (runtime check)."""

from __future__ import annotations

import os

from helpers.exercises import exercise, is_number, require


@exercise("01.1", "count the GPUs TensorFlow sees",
          hint="`tf.config.list_physical_devices(\"GPU\")` returns a list: its `len` is the count.",
          right="That is the number every later notebook's device choice starts from.")
def gpu_count(count) -> str | None:
    require(count)
    import tensorflow as tf

    seen = len(tf.config.list_physical_devices("GPU"))
    if not is_number(count):
        return f"`gpu_count` is a {type(count).__name__} ({count!r}), not an int."
    if count != seen:
        return f"`gpu_count` is {count}, but TensorFlow sees {seen} GPU(s) here."
    return None


@exercise("01.2", "hide every GPU from a child process",
          hint="Copy `os.environ` into a new dict (`{**os.environ, ...}`) and set "
               "`CUDA_VISIBLE_DEVICES` to the empty string; leave `os.environ` itself alone.",
          right="A child started with this environment sees no GPU, and this process keeps its "
                "own.")
def hidden_gpu_env(make_env) -> str | None:
    before = dict(os.environ)
    try:
        env = make_env()
        changed = dict(os.environ) != before
    finally:
        os.environ.clear()
        os.environ.update(before)
    require(env)
    if changed:
        return ("Your function changed this process's `os.environ`: too late for the TensorFlow "
                "already running here, and every later child would inherit it.")
    if not isinstance(env, dict):
        return f"It returned a {type(env).__name__}, not a dict of variables."
    if env.get("CUDA_VISIBLE_DEVICES") not in ("", "-1"):
        return (f"`CUDA_VISIBLE_DEVICES` is {env.get('CUDA_VISIBLE_DEVICES')!r} in it: a child "
                "would still see the GPUs.")
    if lost := sorted(set(before) - set(env)):
        return (f"The child would lose {len(lost)} variable(s) this process has, such as "
                f"{lost[0]}: start from a copy of `os.environ`.")
    return None


@exercise("01.3", "run a computation where you ask, or fail",
          hint="Ask for the device as this notebook's matmul cell does, then read where the "
               "result was computed (its `.device` ends with `TYPE:index`) and raise an error "
               "when that is not what you asked for; or turn soft placement off for the call, "
               "as in \"A first operation\", and back on in a `finally`.",
          right="Your code runs where you asked, or says it cannot: no silent fall-back to the "
                "CPU, the mistake behind most \"is my GPU even used?\" questions.")
def run_on(fn) -> str | None:
    import tensorflow as tf

    a = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    product = tf.matmul(a, a).numpy()
    gpus = len(tf.config.list_logical_devices("GPU"))
    soft = tf.config.get_soft_device_placement()
    asked = []  # the device each call of the work was asked for ("" none, None: unknown)

    def work():
        try:  # no public API says it
            from tensorflow.python.eager import context

            asked.append(context.context().device_name or "")
        except (ImportError, AttributeError):
            asked.append(None)
        return tf.matmul(a, a)

    try:
        for device in ["/CPU:0", *(["/GPU:0"] if gpus else [])]:
            got = fn(device, work)
            require(got)
            if not hasattr(got, "device") or not hasattr(got, "numpy"):
                return f"For {device} it returned a {type(got).__name__}, not the result tensor."
            if asked and asked[-1] is not None and not asked[-1].endswith(device.lstrip("/")):
                return (f"For {device} it ran fn() without asking for that device (it ran where "
                        "TensorFlow chose, which happened to fit): call it under "
                        "`tf.device(device)`.")
            if not got.device.endswith(device.lstrip("/")):
                return f"Asked for {device}, it returned a result computed on {got.device}."
            if not (got.numpy() == product).all():
                return f"For {device} the result is not what fn() computes."
        missing = f"/GPU:{gpus}"  # one more GPU than this runtime has
        try:
            got = fn(missing, work)
        except (RuntimeError, ValueError, LookupError, AssertionError, tf.errors.OpError):
            return None  # a refusal (anything else is a bug in the answer, reported as one)
        require(got)
        return (f"Asked for {missing}, which this runtime does not have, it returned a result "
                f"computed on {getattr(got, 'device', 'another device')} and said nothing: "
                "compare the result's `.device` with what was asked, and raise when they differ.")
    finally:
        tf.config.set_soft_device_placement(soft)  # as it was, whatever the answer changed
