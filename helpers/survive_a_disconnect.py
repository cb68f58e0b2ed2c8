"""Plumbing of notebook 05: where the run lives (Drive on Colab), checkpoints, a session's share."""

import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

from helpers import workdirs
from helpers.dcgan import duration, gan_rules
from helpers.devices import detect_platform
from helpers.errors import ONE_LINE_ERRORS, ChildDied
from helpers.params import all_of, boolean, check, folder, integer, number, one_of, validate


def plan_session(saved_step: int, steps_per_epoch: int, epochs: int, seconds_per_epoch: float,
                 budget_s: float, every: int) -> SimpleNamespace:
    """This session's ``epochs`` (at least one), ``die_at`` (mid-share, between saves), a line."""
    total, done = epochs * steps_per_epoch, saved_step // steps_per_epoch
    fit = max(1, int(budget_s // max(seconds_per_epoch, 1e-9)))
    share = min(epochs, done + fit)
    end, die_at = share * steps_per_epoch, None
    if saved_step < total // 2:  # a child dies halfway between the two saves around mid-share
        middle = min(total // 2, saved_step + (end - saved_step) // 2)
        last = max(saved_step, middle - middle % every, middle - middle % steps_per_epoch)
        after = min(last + every - last % every, last + steps_per_epoch - last % steps_per_epoch)
        die_at = (last + after) // 2 + 1  # it trains up to die_at - 1
    if done >= epochs:
        return SimpleNamespace(epochs=epochs, die_at=None, line="the run is complete.")
    line = (f"an epoch's steps take about {duration(seconds_per_epoch)} here (timed without "
            f"tracing, scoring or saving), so the {epochs - done} epoch(s) left about "
            f"{duration((epochs - done) * seconds_per_epoch)}; ")
    if budget_s < seconds_per_epoch:
        line += (f"the budget ({duration(budget_s)}) is shorter than one epoch, so this session "
                 f"trains to epoch {share} of {epochs} (one epoch at least)")
    elif share == epochs:
        line += f"they fit in the budget ({duration(budget_s)}): this session trains them all"
    else:
        line += (f"the budget ({duration(budget_s)}) fits {fit}: this session trains to epoch "
                 f"{share} of {epochs}")
    line += ", and a re-run with the same run_dir goes on from there." if share < epochs else "."
    return SimpleNamespace(epochs=share, die_at=die_at, line=line)


def in_drive(use_drive) -> bool:
    """``use_drive`` resolved: "auto" means on Colab (whose /content is lost on a disconnect)."""
    return use_drive is True or (use_drive == "auto" and detect_platform() == "colab")


def run_directory(run_dir: str, use_drive=False) -> Path:
    """Where a run keeps its files, said in one line: ``run_dir``, in Drive with ``use_drive``."""
    if in_drive(use_drive):
        from google.colab import drive  # only on Colab

        drive.mount("/content/drive")
        where = Path(workdirs.COLAB_DRIVE) / run_dir
        print(f"run_dir: {where} (in Google Drive: it survives a disconnect)")
        return where
    lost = " (Colab's /content does not survive a disconnect)" * (detect_platform() == "colab")
    print(f"run_dir: {Path(run_dir).resolve()}{lost}")
    return Path(run_dir)


def checkpoints_on_disk(directory) -> list[str]:
    """``directory``'s checkpoints by their files, oldest first (Drive can garble the index)."""
    found = (re.fullmatch(r"ckpt-(\d+)\.index", p.name) for p in Path(directory).glob("ckpt-*"))
    steps = sorted(int(m[1]) for m in found if m)
    return [os.path.join(str(directory), f"ckpt-{n}") for n in steps]


def set_aside_unreadable_index(directory) -> None:
    """Rename (never delete) an index file TensorFlow cannot read, so the run is read from files."""
    import tensorflow as tf

    try:
        tf.train.get_checkpoint_state(str(directory))
    except (ValueError, OSError):
        aside = Path(directory) / f"checkpoint.unreadable-{time.time():.0f}"
        (Path(directory) / "checkpoint").rename(aside)
        print(f"WARNING: the checkpoints' index could not be read; kept as {aside.name}.")


def run_child(main, *args) -> None:
    """``main(*args)`` in a child: a course error ends it with its one line (exit status 1)."""
    try:
        main(*args)
    except ONE_LINE_ERRORS as error:  # a full disk, say: no traceback
        raise SystemExit(f"{type(error).__name__}: {error}") from None  # to stderr


def child_error(last_line: str, otherwise: str) -> Exception:
    """The course error a child ended with (:func:`run_child` prints it last), else ChildDied."""
    name, _, message = last_line.strip().partition(": ")
    known = {error.__name__: error for error in ONE_LINE_ERRORS}
    return known[name](message) if name in known else ChildDied(otherwise)


def check_parameters(*, budget_min, checkpoint_every, run_dir, use_drive, fresh_start, **gan):
    """Notebook 05's parameters (04's, and the run's), checked first: one line names a wrong one."""
    return validate(
        **gan_rules(**gan),
        budget_min=(budget_min, number(0, 24 * 60)),
        checkpoint_every=(checkpoint_every, integer(1, 1_000_000)),
        run_dir=(run_dir, folder(inside=workdirs.COLAB_DRIVE if in_drive(use_drive) else None)),
        use_drive=(use_drive, all_of(one_of("auto", True, False), check(
            lambda v: v is not True or detect_platform() == "colab",
            "Google Drive can only be used on Colab"))),
        fresh_start=(fresh_start, boolean()))
