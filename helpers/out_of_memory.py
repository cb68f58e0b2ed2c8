"""Plumbing of notebook 06 (out of memory): child-process trials, the batch search and memory
readings.

Memory plumbing for notebook 06: the course's message when a device setting comes too
late, memory measured in a child process, and the largest-batch search. The lessons themselves
(memory growth and limits, catching an OOM, the memory estimate, gradient accumulation) are
written in the notebook's cells (helpers.lessons.out_of_memory holds its ``#@save`` ones).
"""

from __future__ import annotations

import gc
import os
import re
import resource
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import numpy as np

from helpers import devices, models, processes
from helpers.devices import precision
from helpers.errors import (
    CANNOT_SWITCH,
    TOO_LATE,
    ChildDied,
    ChildOutOfMemory,
    ChildTimeout,
    LateConfigurationError,
    MemoryBudgetExceeded,
)
from helpers.logs import import_tensorflow
from helpers.params import integer, list_of, one_of, validate

#: The hint the "too late" message adds for GPU memory.
GROWTH_HINT = " For memory growth, you can also start Python with TF_FORCE_GPU_ALLOW_GROWTH=true."


def late_error(error: BaseException, asked: str) -> LateConfigurationError:
    """The course's clear message for TensorFlow's error when a device setting comes too late.

    ``error`` is what TensorFlow raised (``RuntimeError: Physical devices cannot be modified
    after being initialized``, ``Virtual devices cannot ...``, or the ``ValueError`` for memory
    growth on top of a limit); ``asked`` says what was asked for. The notebook raises or prints
    the result.
    """
    if "virtual devices configured" in str(error):
        return LateConfigurationError(f"Asked for {asked}, too late. {CANNOT_SWITCH}")
    return LateConfigurationError(f"Asked for {asked}, too late. {TOO_LATE}{GROWTH_HINT}")


def gpu_used_mb(index: int = 0) -> float | None:
    """GPU ``index``'s memory in use, all processes together, as ``nvidia-smi`` reports it
    (MiB); None without nvidia-smi."""
    gpus = devices.nvidia_smi()  # looked up when called (tests replace it)
    return gpus[index]["memory_used_mib"] if len(gpus) > index else None


def _status_mb(key: str) -> float | None:
    """A ``/proc/self/status`` figure (``VmRSS``, ``VmHWM``) in MiB; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB.

    On Linux it is ``VmHWM``, this program's own high-water mark. ``getrusage``'s
    ``ru_maxrss`` is not: a process started with fork (a fork server's child) or fork and exec
    (a ``spawn`` child) inherits its parent's resident size at the fork in it, so a child reads
    its parent's size, not its own. ``ru_maxrss`` is the fallback elsewhere (bytes on macOS).
    """
    hwm = _status_mb("VmHWM")
    if hwm is not None:
        return hwm
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss / 2**20 if sys.platform == "darwin" else maxrss / 1024


def reset_peak_rss() -> bool:
    """Restart the peak (``VmHWM``) from the resident memory now (Linux 4.0+ ``clear_refs``).
    Returns False where that is not possible: the peak then runs on from the process start."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def is_oom(error: BaseException) -> bool:
    """True for out-of-memory errors: TF's ResourceExhaustedError, or a MemoryError."""
    import tensorflow as tf

    return isinstance(error, tf.errors.ResourceExhaustedError | MemoryError)


@dataclass
class BatchSearch:
    """The largest batch that trained, with every try on the way."""

    batch_size: int
    largest_ok: int
    tries: list = field(default_factory=list)  # (batch, "ok" | "OOM")

    @property
    def ooms(self) -> int:
        return sum(result == "OOM" for _, result in self.tries)


def find_max_batch(
    try_batch: Callable[[int], object],
    start: int = 8,
    limit: int = 65536,
    margin: float = 0.9,
    multiple: int = 8,
    oom: Callable[[BaseException], bool] = is_oom,
) -> BatchSearch:
    """Find the largest batch for which ``try_batch(batch)`` runs without running out of memory.

    Doubles from ``start`` until a try fails or ``limit`` is reached, then bisects between
    the last success and the first failure. Only out-of-memory errors (``oom``) count as
    failures; anything else is raised. After each failure Python's garbage is collected,
    so the session stays usable. Returns ``margin`` of the largest success, rounded down
    to a ``multiple`` (leaving room for what varies between steps).
    """
    tries = []

    def fits(batch: int) -> bool:
        try:
            try_batch(batch)
        except Exception as error:  # only an OOM is an answer; the rest is a bug
            if not oom(error):
                raise
            tries.append((batch, "OOM"))
            gc.collect()
            return False
        tries.append((batch, "ok"))
        return True

    if not fits(start):
        raise MemoryError(f"even batch_size={start} does not fit; use a smaller model or start")
    good, bad = start, None
    while bad is None and good < limit:
        candidate = min(good * 2, limit)
        if fits(candidate):
            good = candidate
        else:
            bad = candidate
    while bad is not None and bad - good > max(1, multiple):
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    chosen = max(multiple, int(good * margin) // multiple * multiple) if good >= multiple else good
    return BatchSearch(batch_size=min(chosen, good), largest_ok=good, tries=tries)


def current_rss_mb() -> float:
    """The process's resident memory now, in MiB (from /proc; 0 where unavailable)."""
    return _status_mb("VmRSS") or 0.0


def child_memory_setup(task: dict, gpus=None) -> str:
    """The child's first act, before any TensorFlow op: memory growth, or a hard limit of
    ``task["gpu_limit_mb"]`` on each GPU, so that a batch too large for the limit fails with a
    real out-of-memory error (the GPU counterpart of the CPU's memory budget). It runs notebook
    06's own ``set_gpu_memory`` (helpers.lessons.out_of_memory), and says what it set."""
    import tensorflow as tf

    from helpers.lessons.out_of_memory import set_gpu_memory

    limit = int(task.get("gpu_limit_mb") or 0)
    gpus = tf.config.list_physical_devices("GPU") if gpus is None else gpus
    set_gpu_memory(gpus, limit)
    if not gpus:
        return "No GPU: nothing to configure (the CPU uses host memory)."
    if limit:
        return f"Each of {len(gpus)} GPU(s) limited to {limit} MiB."
    return f"Memory growth on for {len(gpus)} GPU(s)."


def _child_main(task: dict) -> dict:
    """Runs in a fresh process: build a model from helpers.models, train, return what it saw."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import_tensorflow()
    memory_setting = child_memory_setup(task)
    import keras

    keras.utils.set_random_seed(task.get("seed", 0))
    with precision(task.get("policy")):
        model = models.MODELS[task["model"]](task["x"].shape[1:])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    # the step's growth: the peak during training over the resident memory just before it
    before = current_rss_mb() if reset_peak_rss() else peak_rss_mb()
    history = model.fit(
        task["x"],
        task["y"],
        batch_size=task["batch_size"],
        epochs=task.get("epochs", 1),
        steps_per_epoch=task.get("steps"),
        verbose=0,
    )
    import tensorflow as tf

    gpu_peak = None
    if tf.config.list_physical_devices("GPU"):
        try:
            gpu_peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        except (ValueError, tf.errors.OpError):  # an allocator that keeps no statistics
            gpu_peak = None
    peak = peak_rss_mb()
    return {
        "history": history.history,
        "weights": model.get_weights(),
        "peak_rss_mb": peak,
        "step_rss_mb": max(0.0, peak - before),
        "gpu_peak_mb": gpu_peak,
        "memory_setting": memory_setting,
        "allocator": os.environ.get("TF_GPU_ALLOCATOR") or "TensorFlow's own (BFC)",
    }


def _child_entry(target, task, connection, environ=None) -> None:
    """The child's side of :func:`run_in_child`: take the caller's environment as it is now
    (a fork server's child would otherwise have the server's, from when it started: a
    ``TF_GPU_ALLOCATOR`` set since would never reach it), run ``target(task)``, send back the
    result, or the error as one line (the parent raises it)."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    try:
        reply = {"result": target(task)}
    except BaseException as error:  # reported to the parent, which raises it
        reply = {"error": f"{type(error).__name__}: {error}"}
    try:
        connection.send(reply)
    except Exception as error:  # a result that cannot be pickled, say
        connection.send({"error": f"{type(error).__name__}: {error}"})
    connection.close()


def _death(pid: int, exitcode: int | None, what: str) -> Exception:
    """The error for a child that ended without a reply: SIGKILL is the kernel's
    out-of-memory killer's signal, so it counts as an out-of-memory try."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            error = ChildOutOfMemory(
                f"the child process ({what}) was killed by SIGKILL without reporting back, "
                "as the out-of-memory killer does: counted as out of memory"
            )
            error.pid = pid
            return error
        return ChildDied(
            f"the child process ({what}) died from {name} without reporting back "
            f"(exit code {exitcode}): a crash, not an out-of-memory error",
            pid,
            exitcode,
        )
    return ChildDied(
        f"the child process ({what}) exited with code {exitcode} without reporting back",
        pid,
        exitcode,
    )


def run_in_child(target, task, timeout: float = 600, what: str = "") -> dict:
    """Run ``target(task)`` in a fresh process (:func:`helpers.processes.context`: TensorFlow
    imported, never started) and return its result,
    as a dict with the child's ``exit_code`` and ``pid`` added. ``target`` must be importable
    by name.

    It waits on the reply and on the process itself at once, so a child that dies is noticed
    the moment it dies: killed by SIGKILL (the out-of-memory killer) it raises
    :class:`ChildOutOfMemory`; any other death (a segfault, say) :class:`ChildDied`; no reply
    within ``timeout`` seconds kills the child and raises :class:`ChildTimeout`. An error
    inside the child comes back as ``RuntimeError("the child process failed: ...")``, or as
    :class:`ChildOutOfMemory` when it was an out-of-memory error. The child never outlives
    this call (an interrupt included).
    """
    what = what or getattr(target, "__name__", "child")
    context = processes.context()
    reader, writer = context.Pipe(duplex=False)
    environ = dict(os.environ)  # the child's, as a new process started now would get it
    child = context.Process(target=_child_entry, args=(target, task, writer, environ),
                            daemon=True)
    child.start()
    writer.close()  # the child holds the only writing end: its death reads as end of file
    reply = None
    try:
        deadline = time.monotonic() + timeout
        while reply is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildTimeout(
                    f"the child process ({what}) did not report back within {timeout:g} s; "
                    "it was killed",
                    child.pid,
                )
            ready = wait([reader, child.sentinel], timeout=left)
            if reader in ready:
                try:
                    reply = reader.recv()
                except EOFError:  # it died; its exit code says how
                    break
            elif child.sentinel in ready and not reader.poll():
                break
    finally:
        reader.close()
        child.join(timeout=30 if reply is not None else 0.5)
        if child.is_alive():
            child.kill()
            child.join()
    if reply is None:
        raise _death(child.pid, child.exitcode, what)
    if "error" in reply:
        text = reply["error"]
        # cuDNN under a tight limit can fail as InternalError "... out of memory"
        if text.startswith(("ResourceExhaustedError", "MemoryError")) or re.search(
            r"\bOOM\b|out of memory", text, re.IGNORECASE
        ):
            raise ChildOutOfMemory(text)
        raise RuntimeError(f"the child process failed: {text}")
    result = reply["result"]
    if isinstance(result, dict):
        result = {**result, "exit_code": child.exitcode, "pid": child.pid}
    return result


def train_in_child(
    model: str,
    x,
    y,
    batch_size: int,
    epochs: int = 1,
    steps: int | None = None,
    policy: str | None = None,
    timeout: float = 600,
    gpu_limit_mb: float | None = None,
) -> dict:
    """Train ``helpers.models.MODELS[model]`` in a child process and return its history,
    weights and memory; all its memory goes back to the system when it exits.

    TensorFlow keeps device memory for the life of a process (``clear_session`` frees
    Python-side state, not that), so a child process is how memory really comes back.
    ``step_rss_mb`` is how far resident memory rose during training above where it stood
    just before (the child's own figure, whatever the parent's size).
    ``gpu_limit_mb`` caps the child's GPU memory (a logical device limit); without it the
    child's GPU memory grows as needed. A child killed by the out-of-memory killer raises
    :class:`ChildOutOfMemory` at once; see :func:`run_in_child`.
    """
    task = {
        "model": model,
        "x": x,
        "y": y,
        "batch_size": batch_size,
        "epochs": epochs,
        "steps": steps,
        "policy": policy,
        "gpu_limit_mb": int(gpu_limit_mb) if gpu_limit_mb else None,
    }
    return run_in_child(_child_main, task, timeout, what=f"training batch {batch_size}")


def budget_trial(model: str, x, y, budget_mb: float, steps: int = 2, policy: str | None = None):
    """A ``try_batch`` for :func:`find_max_batch`: train ``steps`` steps in a child process;
    fail like an OOM when the memory used exceeds ``budget_mb`` (on the CPU, the growth of
    resident memory; on a GPU, its peak), or when the child really runs out of memory.

    On a GPU a finite budget is also the child's hard memory limit, so a batch that does not
    fit fails with TensorFlow's own ResourceExhaustedError, as it would on a smaller GPU."""
    limit = budget_mb if np.isfinite(budget_mb) else None

    def try_batch(batch: int) -> float:
        need = max(batch * steps, batch)
        reps = -(-need // len(x))
        xs, ys = np.tile(x, (reps,) + (1,) * (x.ndim - 1))[:need], np.tile(y, reps)[:need]
        result = train_in_child(
            model, xs, ys, batch, steps=steps, policy=policy, gpu_limit_mb=limit
        )
        used = result["gpu_peak_mb"] or result["step_rss_mb"]  # a GPU's own peak where present
        if used > budget_mb:
            raise MemoryBudgetExceeded(f"batch {batch} used {used:.0f} MiB > {budget_mb} MiB")
        return used

    return try_batch


def check_parameters(*, model_name, batch_sizes, memory_limit_mb, budget_mb, max_batch,
                     micro_batch):
    """Notebook 06's parameters, checked before any work: one line names a wrong one."""
    smi = devices.nvidia_smi()  # a limit above the smallest GPU's memory means nothing
    gpu_mb = min((g["memory_total_mib"] or 1_000_000 for g in smi), default=1_000_000)
    return validate(
        model_name=(model_name, one_of(*models.MODELS)),
        batch_sizes=(batch_sizes, list_of(integer(1, 65536), "expected a list of integers >= 1")),
        memory_limit_mb=(memory_limit_mb, integer(0, gpu_mb)),
        budget_mb=(budget_mb, integer(1, 10_000_000)),
        max_batch=(max_batch, integer(8, 1_000_000)),
        micro_batch=(micro_batch, integer(1, 65536)),
    )
