"""Plumbing of notebook 10 (TPUs with PyTorch/XLA): checks, checkpoints, tables; no TensorFlow."""

import importlib
import re
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from helpers import devices
from helpers.data_parallel import batch_rule
from helpers.errors import EngineError, RunUnreadable, show_as_one_line
from helpers.gpu_vs_cpu_benchmark import in_turns as in_turns  # 02's: 10 calls it here
from helpers.params import all_of, boolean, enough_images, folder, integer, validate
from helpers.tpu_keras_jax import against_float64, describe  # noqa: F401 (09's: 10 calls them)

CHECKPOINT = re.compile(r"^step-(\d{7})\.pt$")


def require_torch_xla(oldest: str = "2.8", environ=None) -> None:
    """Raise :class:`EngineError` (one line) unless torch_xla ``oldest`` or newer and torch load."""
    have = version("torch_xla") if find_spec("torch_xla") else ""
    what = f"torch_xla {have}" if have else "no torch_xla"
    if [int(n) for n in re.findall(r"\d+", have)[:2]] >= [int(n) for n in oldest.split(".")]:
        try:  # torch_xla stands on torch: one missing, or failing to import, stops here too
            if find_spec("torch") and importlib.import_module("torch"):
                return
            what = "no torch"
        except Exception as error:  # e.g. an OSError: a library torch's build needs is missing
            what = f"a torch that fails to import ({type(error).__name__})"
    install = "pip install the same release of torch and torch_xla[tpu]"
    if devices.tpu_hardware_present(environ):  # a TPU runtime whose torch_xla is missing or old
        advice = f"{install}, {oldest} or newer, then restart the runtime"
    else:
        elsewhere = f"Colab's v5e-1 TPU or Kaggle's TPU v5e-8, or {install}"
        advice = "pick a TPU runtime: " + {
            "colab": "Runtime > Change runtime type > v5e-1 TPU",
            "kaggle": "Settings > Accelerator > TPU v5e-8",
        }.get(devices.detect_platform(environ), elsewhere)
    show_as_one_line()
    raise EngineError(f"This runtime has {what}; this notebook needs torch_xla {oldest} or "
                      f"newer: {advice}.")


def weights(*models) -> list[np.ndarray]:  # a float64 copy of every parameter, on the CPU
    return [np.array(p.detach().cpu().double()) for m in models for p in m.parameters()]


def checkpoints(run: Path) -> list[Path]:
    """The run's checkpoint files (``step-NNNNNNN.pt``), oldest first."""
    return sorted(p for p in Path(run).iterdir() if CHECKPOINT.match(p.name))


def keep_newest(run: Path, keep: int = 3, upto: int | None = None) -> list[Path]:
    """Delete (and return) all but the ``keep`` newest checkpoints up to step ``upto`` (ours)."""
    mine = [p for p in checkpoints(run) if upto is None or int(CHECKPOINT.match(p.name)[1]) <= upto]
    for path in mine[:-keep]:
        path.unlink()
    return mine[:-keep]


def none_skipped(run: Path, skipped: list[str], resumed: str = "") -> None:
    """Raise :class:`RunUnreadable` if the resume skipped files (damaged, or not this notebook's):
    newer than ``resumed``, which the steps ahead would write over or prune, or all there were."""
    if skipped:
        where = f", newer than {resumed}: the steps ahead would write over them" if resumed else ""
        raise RunUnreadable(f"{run} holds {', '.join(skipped)}, not readable as this notebook's "
                            f"checkpoint(s){where}; nothing was changed. Move them away, use "
                            "another run_dir, or fresh_start=True to replace the run.")


def not_a_checkpoint(state, parts: dict) -> str | None:
    """Why ``state`` (a loaded checkpoint) is none that ``parts`` {name: module} load; else None."""
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a dict"
    if missing := sorted({"step", "settings", "losses", *parts} - state.keys()):
        return f"no {', '.join(missing)} in it"
    if not isinstance(state["step"], int) or not isinstance(state["settings"], dict):
        return "its step is not a whole number, or its settings not a dict"
    if not isinstance(state["losses"], list) or not all(
            isinstance(row, list | tuple) and len(row) == 3
            and all(isinstance(x, int | float) for x in row) for row in state["losses"]):
        return "its losses are not rows of (step, d_loss, g_loss)"
    for name, part in parts.items():
        if not _fits(state[name], part):
            return f"its {name} has other keys or shapes than this notebook's"
    return None


def _fits(saved, part) -> bool:
    """Whether ``saved`` has ``part.state_dict()``'s keys and shapes (a network or optimizer)."""
    live = part.state_dict()
    try:  # any part of ``saved`` may be of any type: an error means it is not ``part``'s
        if "param_groups" not in live:  # a network
            return saved.keys() == live.keys() and all(
                getattr(saved[k], "shape", None) == v.shape for k, v in live.items())
        groups = [(sorted(g), len(g["params"])) for g in live["param_groups"]]
        if [(sorted(g), len(g["params"])) for g in saved["param_groups"]] != groups:
            return False  # another optimizer, or other networks' parameters
        shapes = [p.shape for group in part.param_groups for p in group["params"]]
        return all(getattr(t, "shape", None) == (() if key == "step" else shapes[i])
                   for i, state in saved["state"].items() for key, t in state.items())
    except (AttributeError, IndexError, KeyError, TypeError):
        return False


def check_parameters(*, global_batch_size, steps, checkpoint_every, max_images, use_bfloat16,
                     run_dir, fresh_start):
    """Notebook 10's parameters, checked before any work: one line names a wrong one."""
    import torch_xla.runtime as xr

    return validate(
        global_batch_size=(global_batch_size, batch_rule(xr.global_runtime_device_count())),
        steps=(steps, integer(3, 1_000_000)),
        checkpoint_every=(checkpoint_every, integer(1, 1_000_000)),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(global_batch_size))),
        use_bfloat16=(use_bfloat16, boolean()),
        run_dir=(run_dir, folder()),
        fresh_start=(fresh_start, boolean()))
