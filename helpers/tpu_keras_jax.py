"""Plumbing of notebook 09 (TPUs with Keras 3 on JAX): checks, tables, sentences; no TensorFlow."""

import os
import sys

import numpy as np

from helpers.data_parallel import batch_rule
from helpers.display import Table
from helpers.errors import EngineError, engine_too_late, show_as_one_line
from helpers.gpu_vs_cpu_benchmark import MIN_ROUNDS, called, median_range
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
        after, before = flat(runs[exact]["weights"]).astype("float32"), flat(runs[exact]["start"])
        assert away[own] > 3 * distance(after - before, moved[exact]), f"{model}: a step too small"
        for name, gap in away.items():
            loss = np.max(np.abs(np.subtract(runs[name]["loss"], runs[exact]["loss"])))
            rows.append([model, name, f"{loss:.2e}", f"{gap:.2e}"])
            lines += [line(f"{model}, {name}", gap, away[own])] if name != own else []
    headers = ["model", "run", "loss: diff from float64", "update: distance from float64"]
    return Table(rows, headers), lines


def levers(rates: dict, base: str) -> tuple[Table, str]:
    """images/s over ``base``'s, round by round (02's rule); the sentence groups the verdicts."""
    rows, groups = [], {}
    for name, values in rates.items():
        ratios = np.divide(values, rates[base])  # timed in the same rounds
        verdict = called(ratios, more=f"pass rounds >= {MIN_ROUNDS + 1}")
        said = "" if name == base else f"{median_range(ratios, 2, 1, 'x')}, {verdict}"
        rows.append([name, median_range(values, 0, 1), said])
        if name != base:
            groups.setdefault(verdict, []).append(f"{name} ({np.median(ratios):.2f}x)")
    grouped = "; ".join(f"{', '.join(names)}: {verdict}" for verdict, names in groups.items())
    return Table(rows, ["fit", "images/s: median (min-max)", f"vs {base}, by round"]), (
        f"Against {base}, round by round: {grouped}.")


def check_parameters(*, global_batch_size, rounds, timed_steps, steps_per_execution, max_images,
                     use_bfloat16):
    """Notebook 09's parameters, checked before any work: one line names a wrong one."""
    import jax

    epoch = max_images // global_batch_size if isinstance(max_images, int) and isinstance(
        global_batch_size, int) and global_batch_size > 0 else 10_000
    return validate(global_batch_size=(global_batch_size, batch_rule(len(jax.devices()))),
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
