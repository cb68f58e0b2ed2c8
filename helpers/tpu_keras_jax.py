"""Plumbing of notebook 09 (TPUs with Keras 3 on JAX): checks, tables, sentences; no TensorFlow."""

import os
import sys

import numpy as np

from helpers.data_parallel import batch_rule
from helpers.display import Table
from helpers.errors import EngineError, engine_too_late, show_as_one_line
from helpers.params import all_of, boolean, check, enough_images, integer, validate
from helpers.yardstick import distance, flat, line


def require_jax_backend() -> None:
    """Raise :class:`EngineError` unless Keras runs on JAX here (it reads KERAS_BACKEND once)."""
    keras = sys.modules.get("keras")
    backend = keras.backend.backend() if keras else os.environ.get("KERAS_BACKEND", "")
    if backend != "jax":
        show_as_one_line()  # this runs before the validation cell, which installs it too
        raise EngineError(engine_too_late(
            "Keras", "KERAS_BACKEND",
            f"Keras runs on {backend or 'its default backend'} in this kernel, not on JAX"))


def describe(platform: str, count: int, kind: str = "") -> str:
    """``"8 TPU v5 lite chip(s)"`` or ``"8 simulated CPU device(s) (no TPU here)"`` (09 and 10)."""
    return (f"{count} simulated CPU device(s) (no TPU here)" if platform.lower() == "cpu"
            else f"{count} {kind or platform.upper()} chip(s)")


def against_float64(models: dict, exact: str, own: str) -> tuple[Table, list[str]]:
    """Each run's loss and update against float64's ``exact``; the lines on all but ``own``."""
    rows, lines = [], []
    for model, runs in models.items():
        moved = {name: flat(run["weights"]) - flat(run["start"]) for name, run in runs.items()}
        away = {name: distance(moved[name], moved[exact]) for name in runs if name != exact}
        for name, gap in away.items():
            loss = np.max(np.abs(np.subtract(runs[name]["loss"], runs[exact]["loss"])))
            rows.append([model, name, f"{loss:.2e}", f"{gap:.2e}"])
            lines += [line(f"{model}, {name}", gap, away[own])] if name != own else []
    headers = ["model", "run", "loss: diff from float64", "update: distance from float64"]
    return Table(rows, headers), lines


def levers(rates: dict, base: str, again: str) -> tuple[Table, str]:
    """images/s against ``base``; the rows grouped by the noise that ``again`` (the same) shows:
    faster or slower only beyond it and with a spread clear of both rows'."""
    if (timed := len(rates[base])) < 5:  # fewer rounds' IQR says nothing of the spread (as 02)
        medians = Table([[n, f"{np.median(v):.0f}"] for n, v in rates.items()],
                        ["fit", "images/s: median"])
        return medians, f"{timed} timed round(s) each: too few to judge a lever; pass rounds >= 6."
    (b1, b, b3), rows, ratios, spreads = np.percentile(rates[base], [25, 50, 75]), [], {}, {}
    a1, a3 = np.percentile(rates[again], [25, 75])
    apart = {}  # a row's spread clear of both the base's and the repeat's
    for name, values in rates.items():
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        ratios[name], spreads[name] = 1.0 if q1 <= b3 and b1 <= q3 else median / b, q3 / q1
        apart[name] = q1 > max(b3, a3) or q3 < min(b1, a1)
        versus = f"{ratios[name]:.2f}x" if ratios[name] != 1.0 else "within the spread"
        rows.append([name, f"{median:.0f} ({q1:.0f}-{q3:.0f})", "" if name == base else versus])
    noise = max(ratios[again], 1 / ratios[again], spreads[base], spreads[again])
    clear = {n: r for n, r in ratios.items() if apart[n] and not 1 / noise <= r <= noise}
    groups = {"faster": [f"{n} ({r:.2f}x)" for n, r in clear.items() if r > 1],
              "slower": [f"{n} ({r:.2f}x)" for n, r in clear.items() if r < 1],
              "within it": [n for n in ratios if n not in clear and n not in (base, again)]}
    said = "; ".join(f"{group}: {', '.join(names)}" for group, names in groups.items() if names)
    again_was = "a rate within its spread" if ratios[again] == 1.0 else f"{ratios[again]:.2f}x"
    return Table(rows, ["fit", "images/s: median (IQR)", f"vs {base}"]), (
        f"Measured again, the same configuration gave {again_was}; with the two rows' spreads, "
        f"this run's noise spans {1 / noise:.2f}x to {noise:.2f}x. Against {base}, {said}.")


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


def check_loaded(steps_per_execution: int, images: int, global_batch_size: int) -> None:
    """steps_per_execution against the data loaded: a stand-in may hold fewer than max_images."""
    steps = images // global_batch_size
    allowed = f"at most {steps}, the whole global batches in the {images} images loaded"
    rule = check(lambda value: value <= steps, allowed)
    validate(echo=False, steps_per_execution=(steps_per_execution, rule))
