"""Plumbing of notebook 09 (TPUs with Keras 3 on JAX): checks, tables, sentences; no TensorFlow."""

import os
import sys

import numpy as np

from helpers.data_parallel import batch_rule, largest_difference
from helpers.display import Table
from helpers.errors import EngineError, engine_too_late, show_as_one_line
from helpers.params import all_of, boolean, check, enough_images, integer, validate


def require_jax_backend() -> None:
    """Raise :class:`EngineError` unless Keras runs on JAX here (it reads KERAS_BACKEND once)."""
    keras = sys.modules.get("keras")
    backend = keras.backend.backend() if keras else os.environ.get("KERAS_BACKEND", "")
    if backend != "jax":
        show_as_one_line()  # this runs before the validation cell, which installs it too
        raise EngineError(engine_too_late(
            "Keras", "KERAS_BACKEND",
            f"Keras runs on {backend or 'its default backend'} in this kernel, not on JAX"))


def describe(devices) -> str:
    """``"8 TPU v5 lite chip(s)"`` or ``"8 simulated CPU device(s) (no TPU here)"``."""
    kinds = sorted({getattr(d, "device_kind", d.platform) for d in devices})
    platform = devices[0].platform if devices else "cpu"
    if platform == "cpu":
        return f"{len(devices)} simulated CPU device(s) (no TPU here)"
    return f"{len(devices)} {', '.join(kinds)} device(s) ({platform.upper()})"


def comparison_rows(models: dict, reference: str) -> list[list[str]]:
    """Rows of the 1-versus-N table: per model, each run against ``reference``."""
    return [[model, name, f"{d['loss']:.2e}", f"{d['weights']:.2e}", f"{d.get('update', 0):.2e}"]
            for model, results in models.items()
            for name, d in largest_difference(results, reference).items()]


def lever_table(rates: dict, base: str) -> Table:
    """Median images/s and IQR per configuration, against ``base`` (overlapping IQRs: no gain)."""
    b, rows = np.percentile(rates[base], [25, 50, 75]), []
    for name, values in rates.items():
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        versus = "within the spread" if q1 <= b[2] and b[0] <= q3 else f"{median / b[1]:.2f}x"
        rows.append([name, f"{median:.0f} ({q1:.0f}-{q3:.0f})", "" if name == base else versus])
    return Table(rows, ["fit", "images/s: median (IQR)", f"vs {base}"])


def devices_sentence(rates: dict, count: int, backend: str) -> str:
    """What "all devices" against one device means here, from the table's numbers."""
    one = np.percentile(rates["one device, as configured"], [25, 50, 75])
    every = np.percentile(rates["all devices, as configured"], [25, 50, 75])
    ratio, overlap = every[1] / one[1], every[0] <= one[2] and one[0] <= every[2]
    said = "within the spread of" if overlap else f"{ratio:.2f}x"
    if backend != "cpu":
        return (f"All {count} devices: {said} one device's images/s, on the same global batch "
                f"(each device computing 1/{count} of it).")
    return (f"All {count} simulated devices: {said} one device's images/s. They share this "
            f"host's {os.cpu_count()} cores, so any difference is not added hardware: XLA's CPU "
            f"backend runs {count} smaller programs side by side, and they use the cores "
            "differently than one program on the whole batch (TensorFlow's one CPU device already "
            "uses every core). On a TPU each device is a chip of its own.")


def check_parameters(*, global_batch_size, rounds, timed_steps, steps_per_execution, max_images,
                     use_bfloat16):
    """Notebook 09's parameters, checked before any work: one line names a wrong one."""
    import jax

    epoch = max_images // global_batch_size if isinstance(max_images, int) and isinstance(
        global_batch_size, int) and global_batch_size > 0 else 10_000
    return validate(
        global_batch_size=(global_batch_size, batch_rule(len(jax.devices()))),
        rounds=(rounds, integer(2, 100)),
        timed_steps=(timed_steps, integer(1, 100_000)),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(global_batch_size))),
        steps_per_execution=(steps_per_execution, all_of(integer(1, 10_000), check(
            lambda v: v <= max(epoch, 1), f"at most the {epoch} steps of an epoch "
            "(max_images // global_batch_size)"))),
        use_bfloat16=(use_bfloat16, boolean()))
