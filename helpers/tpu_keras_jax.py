"""Plumbing of notebook 09 (TPUs with Keras 3 on JAX): the engine check, parameter checks, the
device line, the 1-versus-N table. No TensorFlow; Keras and JAX are imported in the functions."""

from __future__ import annotations

import os
import sys

from helpers.data_parallel import batch_rule, largest_difference
from helpers.errors import EngineError, engine_too_late, show_as_one_line
from helpers.params import all_of, boolean, enough_images, integer, validate


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


def check_parameters(*, global_batch_size, epochs, steps_per_execution, gan_steps, max_images,
                     use_bfloat16):
    """Notebook 09's parameters, checked before any work: one line names a wrong one."""
    import jax

    return validate(
        global_batch_size=(global_batch_size, batch_rule(len(jax.devices()))),
        epochs=(epochs, integer(2, 1000)),
        steps_per_execution=(steps_per_execution, integer(1, 10_000)),
        gan_steps=(gan_steps, integer(2, 100_000)),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(global_batch_size))),
        use_bfloat16=(use_bfloat16, boolean()))
