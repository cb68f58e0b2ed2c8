"""Checks for notebook 01's exercises (runtime check)."""

import os
from unittest import mock

from helpers.exercises import exercise, is_number, require


@exercise("01.1", "count the GPUs TensorFlow sees",
          where="the cell under \"The devices TensorFlow sees\" (`list_physical_devices`)",
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
          where="the `run_child` call under \"Hiding a GPU: `CUDA_VISIBLE_DEVICES`\" (its `env=`)",
          hint="Copy `os.environ` into a new dict (`{**os.environ, ...}`) and set "
               "`CUDA_VISIBLE_DEVICES` to the empty string; leave `os.environ` itself alone.",
          right="A child started with this environment sees no GPU, and this process keeps its "
                "own.")
def hidden_gpu_env(make_env) -> str | None:
    # staged: a GPU chosen, as on a shared machine, and one more name; all put back on leaving
    with mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="0", COURSE_EXERCISE_01_2="kept"):
        staged = dict(os.environ)
        env = make_env()
        changed = dict(os.environ) != staged
    require(env)
    if changed:
        return ("Your function changed this process's `os.environ`: too late for the TensorFlow "
                "already running here, and every later child would inherit it.")
    if not isinstance(env, dict):
        return f"It returned a {type(env).__name__}, not a dict of variables."
    if env.get("CUDA_VISIBLE_DEVICES") not in ("", "-1"):
        return (f"`CUDA_VISIBLE_DEVICES` is {env.get('CUDA_VISIBLE_DEVICES')!r} in it: a child "
                "would still see the GPUs.")
    if lost := sorted(set(staged) - set(env)):
        return (f"The child would lose {len(lost)} variable(s) this process has, such as "
                f"{lost[0]}: start from a copy of `os.environ`.")
    return None


@exercise("01.3", "run a computation where you ask, or fail",
          where="\"A first operation, placed on the device\": `.device`, and soft placement",
          hint="Ask for the device as this notebook's matmul cell does, then read where the "
               "result was computed (its `.device` ends with `TYPE:index`) and raise an error "
               "when that is not what you asked for; or turn soft placement off for the call, "
               "as in \"A first operation\", and back on in a `finally`.",
          right="Your code runs where you asked, or says it cannot: no silent fall-back to the "
                "CPU, the mistake behind most \"is my GPU even used?\" questions.")
def run_on(fn) -> str | None:
    import tensorflow as tf
    from tensorflow.python.eager import context

    soft, a = tf.config.get_soft_device_placement(), tf.constant([[1.0, 2.0], [3.0, 4.0]])
    product = tf.matmul(a, a).numpy()
    asked = []  # the device each call of the work was asked for ("": none)

    def work():
        asked.append(context.context().device_name or "")  # no public API says it
        return tf.matmul(a, a)

    devices = [d.name.replace("device:", "") for d in tf.config.list_logical_devices()
               if d.device_type in ("CPU", "GPU")]  # "/CPU:1" too, where Setup split the CPU
    try:
        for device in [d for d in devices if d[-2:] in (":0", ":1")]:
            got = fn(device, work)
            require(got)
            if not hasattr(got, "device") or not hasattr(got, "numpy"):
                return f"For {device} it returned a {type(got).__name__}, not the result tensor."
            if not "".join(asked[-1:]).endswith(device.lstrip("/")):
                return (f"For {device} it ran fn() without asking for that device (it ran where "
                        "TensorFlow chose, which happened to fit): call it under "
                        "`tf.device(device)`.")
            if not got.device.endswith(device.lstrip("/")):
                return f"Asked for {device}, it returned a result computed on {got.device}."
            if not (got.numpy() == product).all():
                return f"For {device} the result is not what fn() computes."
        for kind in ("CPU", "GPU"):  # one more of each than there are: "/CPU:1" runs on CPU:0
            missing = f"/{kind}:{sum(d.startswith(f'/{kind}:') for d in devices)}"
            try:
                got = fn(missing, work)
            except (NameError, AttributeError, TypeError, ImportError):
                raise  # a bug in the answer, reported as one
            except Exception:  # any refusal: the task names no error type
                continue
            require(got)
            return (f"Asked for {missing}, which this runtime does not have, it returned a result "
                    f"computed on {getattr(got, 'device', 'another device')} and said nothing: "
                    "compare the result's `.device` (type and index) with what was asked.")
        return None
    finally:
        tf.config.set_soft_device_placement(soft)  # as it was, whatever the answer changed
