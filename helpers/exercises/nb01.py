"""Checks for notebook 01's exercises (runtime check).
"""

from __future__ import annotations

import numbers
import os

from helpers.exercises import exercise, require


@exercise("01.1", "count the GPUs TensorFlow sees",
          hint="`tf.config.list_physical_devices(\"GPU\")` returns a list: its `len` is the count.",
          right="That is the number every later notebook's device choice starts from.")
def gpu_count(count) -> str | None:
    require(count)
    import tensorflow as tf

    seen = len(tf.config.list_physical_devices("GPU"))
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
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
    lost = sorted(set(before) - set(env))
    if lost:
        return (f"The child would lose {len(lost)} variable(s) this process has, such as "
                f"{lost[0]}: start from a copy of `os.environ`.")
    return None


class _Placed:
    """A stand-in for a tensor placed on another machine's device: its ``device`` (where the
    operation ran) and ``backing_device`` (where its memory is), as a real tensor has both."""

    def __init__(self, device: str):
        self.device = self.backing_device = device


@exercise("01.3", "read where an operation ran",
          hint="`tf.DeviceSpec.from_string(tensor.device).device_type` parses the device "
               "string for you; `tensor.device` looks like "
               "`/job:localhost/replica:0/task:0/device:GPU:0`.",
          right="You can now tell from any result where its operation ran.")
def device_type(fn) -> str | None:
    import tensorflow as tf

    with tf.device("/CPU:0"):
        on_cpu = tf.constant([1.0, 2.0]) * 2
    cases = [(on_cpu, "CPU"),
             (_Placed("/job:localhost/replica:0/task:0/device:GPU:1"), "GPU"),
             (_Placed("/job:worker/replica:0/task:0/device:TPU:3"), "TPU")]
    for gpu in tf.config.list_logical_devices("GPU")[:1]:  # the real thing, where there is one
        with tf.device(gpu.name):
            cases.append((tf.constant([1.0]) * 2, "GPU"))
    for tensor, expected in cases:
        got = fn(tensor)
        require(got)
        if got != expected:
            return f"For a tensor on {tensor.device} it returned {got!r}, not {expected!r}."
    return None
