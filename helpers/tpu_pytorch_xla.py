"""Plumbing of notebook 10 (TPUs with PyTorch/XLA): the engine check, parameter checks, the
device line, the run's checkpoints, 1-versus-N table and old posts' calls. No TensorFlow."""

from __future__ import annotations

import importlib
import re
import warnings
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from helpers import devices
from helpers.data_parallel import batch_rule
from helpers.data_parallel import largest_difference as largest_difference  # the notebook's
from helpers.errors import EngineError, RunUnreadable, show_as_one_line
from helpers.params import all_of, boolean, enough_images, folder, integer, validate
from helpers.workdirs import same_settings as same_settings  # notebook 10 checks its run with it

CHECKPOINT = re.compile(r"^step-(\d{7})\.pt$")


def require_torch_xla(oldest: str = "2.8", environ=None) -> None:
    """Raise :class:`EngineError` (one line) unless torch_xla ``oldest`` or newer is installed;
    its advice is what to change here, never the runtime the learner is already on."""
    have = version("torch_xla") if find_spec("torch_xla") else ""
    if [int(n) for n in re.findall(r"\d+", have)[:2]] >= [int(n) for n in oldest.split(".")]:
        return
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
    raise EngineError(f"This runtime has {'torch_xla ' + have if have else 'no torch_xla'}; "
                      f"this notebook needs torch_xla {oldest} or newer: {advice}.")


def describe(device_type: str, count: int) -> str:
    """``"8 TPU chip(s)"`` or ``"8 simulated CPU device(s) (no TPU here)"``."""
    if device_type.upper() == "CPU":
        return f"{count} simulated CPU device(s) (no TPU here)"
    return f"{count} {device_type.upper()} chip(s)"


def weights(*models) -> list[np.ndarray]:  # a float64 copy of every parameter, on the CPU
    return [np.array(p.detach().cpu().double()) for m in models for p in m.parameters()]


def comparison_rows(differences: dict) -> list[list[str]]:  # from largest_difference
    return [[name, f"{d['loss']:.2e}", f"{d['weights']:.2e}", f"{d.get('update', 0):.2e}"]
            for name, d in differences.items()]


def checkpoints(run: Path) -> list[Path]:
    """The run's checkpoint files (``step-NNNNNNN.pt``), oldest first."""
    return sorted(p for p in Path(run).iterdir() if CHECKPOINT.match(p.name))


def keep_newest(run: Path, keep: int = 3, upto: int | None = None) -> list[Path]:
    """Delete (and return) all but the ``keep`` newest checkpoints up to step ``upto`` (the one
    just saved); a later step's (another run's) never counts."""
    mine = [p for p in checkpoints(run) if upto is None or int(CHECKPOINT.match(p.name)[1]) <= upto]
    for path in mine[:-keep]:
        path.unlink()
    return mine[:-keep]


def none_unreadable(run: Path) -> None:
    """Raise :class:`RunUnreadable` if ``run`` holds checkpoints and none could be read."""
    if found := checkpoints(run):
        raise RunUnreadable(f"{run} holds {len(found)} checkpoint(s) and none could be read "
                            f"(newest: {found[-1].name}); nothing was deleted. Use another "
                            "run_dir for a new run, or fresh_start=True to replace them.")


def old_and_new() -> list[list[str]]:
    """The old posts' PyTorch/XLA calls, what replaces each, and what this runtime says."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xm.xla_device()
    said = "; ".join(str(w.message) for w in caught) or "no warning"
    scaler = "torch_xla.amp.GradScaler: " + (
        "still imports" if hasattr(importlib.import_module("torch_xla.amp"), "GradScaler")
        else "ImportError")
    gone = "gone" if not hasattr(xm, "xrt_world_size") else "still there"
    return [
        ["curl ... env-setup.py; python env-setup.py --version ...",
         "Colab's and Kaggle's TPU images ship torch_xla; elsewhere pip install the same "
         "release of torch and torch_xla[tpu]", f"torch_xla {torch_xla.__version__} installed"],
        ["xm.xrt_world_size(), xm.get_ordinal()",
         "XRT is gone: torch_xla.runtime.world_size(), global_ordinal(); under SPMD, one "
         "process: global_runtime_device_count()", f"xm.xrt_world_size: {gone}"],
        ["xm.xla_device()", "torch_xla.device()", f"xm.xla_device() warns: {said}"],
        ["xm.optimizer_step(optimizer)",
         "SPMD: optimizer.step(), the compiler sums the gradients; multi-process "
         "(torch_xla.launch): xm.optimizer_step still all-reduces them",
         f"xm.optimizer_step: {'there' if hasattr(xm, 'optimizer_step') else 'gone'}"],
        ["xm.mark_step()", "torch_xla.sync()",
         f"torch_xla.sync: {'there' if hasattr(torch_xla, 'sync') else 'missing'}"],
        ["a GradScaler with bfloat16", "none: bfloat16 keeps float32's exponent range; "
         "torch.autocast('xla', dtype=torch.bfloat16) alone", scaler],
        ["nn.Sigmoid() + nn.BCELoss() under low precision",
         "logits + nn.BCEWithLogitsLoss(), in float32", "measured in the next cell"],
        ["DataLoader(num_workers=0) as a rule; one IterableDataset per core (get_ordinal)",
         "data that fits kept on the device; else one DataLoader for the global batch, "
         "MpDeviceLoader(input_sharding=...) splits it", "the data section above"],
        ["xm.master_print(...)", "print(...): SPMD runs one process", "the prints above"]]


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
