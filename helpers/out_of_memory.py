"""Plumbing of 07 (out of memory): training in a child (its memory freed at exit), batch search."""

import contextlib
import gc
import inspect
import os
import re
import signal
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np

from helpers import devices, errors, models, processes
from helpers.errors import ChildDied, ChildOutOfMemory, ChildTimeout
from helpers.gpu_vs_cpu_benchmark import MIN_ROUNDS, median_range, versus
from helpers.logs import import_tensorflow
from helpers.params import integer, list_of, one_of, proc_kib, validate


def late_error(error: BaseException, asked: str) -> errors.LateConfigurationError:
    """The course's message for TensorFlow's error on a device setting, ``asked``, made too late."""
    if "virtual devices configured" in str(error):
        return errors.LateConfigurationError(f"Asked for {asked}, too late. {errors.CANNOT_SWITCH}")
    hint = " For memory growth, you can also start Python with TF_FORCE_GPU_ALLOW_GROWTH=true."
    return errors.LateConfigurationError(f"Asked for {asked}, too late. {errors.TOO_LATE}{hint}")


def gpu_used_mb() -> float | None:
    """The first GPU's memory in use by all processes, from ``nvidia-smi`` (MiB); None without."""
    gpus = devices.nvidia_smi()  # looked up when called (tests replace it)
    return gpus[0]["memory_used_mib"] if gpus else None


def peak_rss_mb() -> float:
    """Peak resident memory in MiB: Linux's ``VmHWM`` (not ``ru_maxrss``, which survives fork)."""
    return (proc_kib("/proc/self/status", "VmHWM") or 0) / 1024


def current_rss_mb() -> float:
    """The process's resident memory now, in MiB (from /proc; 0 where unavailable)."""
    return (proc_kib("/proc/self/status", "VmRSS") or 0) / 1024


@dataclass
class BatchSearch:  # the largest batch that trained, with every try on the way
    batch_size: int
    largest_ok: int
    tries: list = field(default_factory=list)  # (batch, "ok" | "OOM")

    @property
    def ooms(self) -> int:
        return sum(result == "OOM" for _, result in self.tries)


def find_max_batch(try_batch: Callable[[int], object], start: int = 8, limit: int = 65536,
                   margin: float = 0.9, multiple: int = 8) -> BatchSearch:
    """The largest batch ``try_batch`` runs without OOM (double, then bisect); ``margin`` of it."""
    import tensorflow as tf

    tries = []

    def fits(batch: int) -> bool:
        try:
            try_batch(batch)
        except (tf.errors.ResourceExhaustedError, MemoryError):
            tries.append((batch, "OOM"))
            gc.collect()
            return False
        tries.append((batch, "ok"))
        return True

    if not fits(start):
        raise MemoryError(f"even batch_size={start} does not fit; use a smaller model or start")
    good, bad = start, None
    while bad is None and good < limit:  # doubling up to the first failure
        candidate = min(good * 2, limit)
        good, bad = (candidate, None) if fits(candidate) else (good, candidate)
    while bad is not None and bad - good > max(1, multiple):  # then bisecting
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    chosen = max(multiple, int(good * margin) // multiple * multiple) if good >= multiple else good
    return BatchSearch(batch_size=min(chosen, good), largest_ok=good, tries=tries)


def child_memory_setup(task: dict) -> None:
    """The child's first act: the caller's ``memory_setup(gpus, limit_mb)``, from its source."""
    import tensorflow as tf

    name, source = task["memory_setup"]
    namespace = {"tf": tf}
    exec(compile(source, f"<the caller's {name}>", "exec"), namespace)
    limit = int(task.get("gpu_limit_mb") or 0)
    namespace[name](tf.config.list_physical_devices("GPU"), limit)


def _child_main(task: dict) -> dict:  # in a fresh process: build, train, return what it saw
    tf = import_tensorflow()
    child_memory_setup(task)
    import keras

    keras.utils.set_random_seed(0)
    model = models.MODELS[task["model"]](task["x"].shape[1:])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    # the step's growth: the peak during training over the resident memory just before it
    try:  # restart the peak (VmHWM) from now (Linux 4.0+); else it runs on from the start
        Path("/proc/self/clear_refs").write_text("5")
        before = current_rss_mb()
    except OSError:
        before = peak_rss_mb()
    history = model.fit(task["x"], task["y"], batch_size=task["batch_size"],
                        steps_per_epoch=task["steps"], verbose=0)
    gpu_peak = None
    if tf.config.list_physical_devices("GPU"):
        with contextlib.suppress(ValueError, tf.errors.OpError):  # an allocator without stats
            gpu_peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    peak = peak_rss_mb()
    return {"history": history.history, "peak_rss_mb": peak, "gpu_peak_mb": gpu_peak,
            "step_rss_mb": max(0.0, peak - before),
            "allocator": os.environ.get("TF_GPU_ALLOCATOR") or "TensorFlow's own (BFC)"}


def _child_entry(target, task, connection, environ) -> None:  # the child's side of run_in_child
    os.environ.clear()  # the caller's environment now, not the fork server's
    os.environ.update(environ)
    try:  # a result that cannot be pickled fails in send, before anything is written
        connection.send({"result": target(task)})
    except BaseException as error:  # reported to the parent, which raises it
        connection.send({"error": f"{type(error).__name__}: {error}"})
    connection.close()


def _death(pid: int, exitcode: int, what: str) -> Exception:
    """The error for a child that ended without a reply (SIGKILL, the OOM killer's: an OOM)."""
    if exitcode == -signal.SIGKILL:
        error = ChildOutOfMemory(f"the child process ({what}) was killed by SIGKILL without "
                                 "reporting back, as the out-of-memory killer does: counted as "
                                 "out of memory")
    elif exitcode < 0:
        name = {s.value: s.name for s in signal.Signals}.get(-exitcode, f"signal {-exitcode}")
        error = ChildDied(f"the child process ({what}) died from {name} without reporting back "
                          f"(exit code {exitcode}): a crash, not an out-of-memory error")
    else:
        error = ChildDied(f"the child process ({what}) exited with code {exitcode} without "
                          "reporting back")
    error.pid, error.exitcode = pid, exitcode  # a process that has ended by now
    return error


def run_in_child(target, task, timeout: float = 600, what: str = "") -> dict:
    """``target(task)`` in a fresh process that ends with the call: its result, exit code, pid."""
    what = what or getattr(target, "__name__", "child")
    context = processes.context()
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child_entry, daemon=True,  # os.environ: as it is now
                            args=(target, task, writer, dict(os.environ)))
    child.start()
    writer.close()  # the child holds the only writing end: its death reads as end of file
    reply = None
    try:
        if not wait([reader, child.sentinel], timeout=timeout):
            late = ChildTimeout(f"the child process ({what}) did not report back within "
                                f"{timeout:g} s; it was killed")
            late.pid = child.pid
            raise late
        if reader.poll():  # a reply, or the end of the pipe: it died, its exit code says how
            with contextlib.suppress(EOFError):
                reply = reader.recv()
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
        if re.search(r"^(ResourceExhaustedError|MemoryError)|\bOOM\b|out of memory", text, re.I):
            raise ChildOutOfMemory(text)
        raise RuntimeError(f"the child process failed: {text}")
    result = reply["result"]
    if isinstance(result, dict):
        result = {**result, "exit_code": child.exitcode, "pid": child.pid}
    return result


def train_in_child(model: str, x, y, batch_size: int, steps: int | None = None,
                   gpu_limit_mb: float | None = None, *, memory_setup) -> dict:
    """Train ``MODELS[model]`` in a child (its memory freed as it exits) after ``memory_setup``."""
    setup = (memory_setup.__name__, textwrap.dedent(inspect.getsource(memory_setup)))
    task = {"model": model, "x": x, "y": y, "batch_size": batch_size, "steps": steps,
            "gpu_limit_mb": int(gpu_limit_mb) if gpu_limit_mb else None, "memory_setup": setup}
    return run_in_child(_child_main, task, what=f"training batch {batch_size}")


def budget_trial(model: str, x, y, budget_mb: float, steps: int = 2, *, memory_setup):
    """A ``try_batch`` for :func:`find_max_batch`: ``steps`` in a child, OOM past ``budget_mb``."""
    limit = budget_mb if np.isfinite(budget_mb) else None

    def try_batch(batch: int) -> float:
        need = max(batch * steps, batch)  # the data repeated up to that many examples
        xs, ys = np.resize(x, (need, *x.shape[1:])), np.resize(y, need)
        result = train_in_child(model, xs, ys, batch, steps=steps, gpu_limit_mb=limit,
                                memory_setup=memory_setup)
        used = result["gpu_peak_mb"] or result["step_rss_mb"]  # a GPU's own peak where present
        if used > budget_mb:  # the CPU's stand-in for an OOM
            raise MemoryError(f"batch {batch} used {used:.0f} MiB > {budget_mb} MiB")
        return used

    return try_batch


def side_by_side(steps: dict, rounds: int = MIN_ROUNDS) -> dict:
    """{name: call} in turn, ``rounds`` rounds after first calls: seconds, allocator's peak MiB."""
    import tensorflow as tf
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    memory = tf.config.experimental  # on a CPU, with TF_CPU_ALLOCATOR_USE_BFC=true set in time
    runs = {name: {"s": [], "mib": []} for name in steps}
    for _ in range(rounds + 1):  # the first round: first calls (tracing, compiling), not kept
        for name, step in steps.items():
            memory.reset_memory_stats(device)
            held, start = memory.get_memory_info(device)["current"], time.perf_counter()
            step()
            tf.test.experimental.sync_devices()
            runs[name]["s"].append(time.perf_counter() - start)
            runs[name]["mib"].append((memory.get_memory_info(device)["peak"] - held) / 2**20)
    return {name: {key: values[1:] for key, values in run.items()} for name, run in runs.items()}


def side_by_side_rows(runs: dict):
    """Per step: peak MiB and ms, median (min-max), and against the first step's, by round."""
    first = next(iter(runs.values()))
    for name, run in runs.items():
        row = [name]
        for key, scale, ways in (("mib", 1, ("more", "less")), ("s", 1e3, ("slower", "faster"))):
            row += [median_range(run[key], 1, scale), "-" if run is first else
                    versus(run[key], first[key], ways)]
        yield row


def check_parameters(*, model_name, batch_sizes, memory_limit_mb, budget_mb, max_batch,
                     micro_batch, remedy_batch):
    """Notebook 07's parameters, checked before any work: one line names a wrong one."""
    smi = devices.nvidia_smi()  # a limit above the smallest GPU's memory means nothing
    gpu_mb = min((g["memory_total_mib"] or 1_000_000 for g in smi), default=1_000_000)
    return validate(
        model_name=(model_name, one_of(*models.MODELS)),
        batch_sizes=(batch_sizes, list_of(integer(1, 65536), "expected a list of integers >= 1")),
        memory_limit_mb=(memory_limit_mb, integer(0, gpu_mb)),
        budget_mb=(budget_mb, integer(1, 10_000_000)),
        max_batch=(max_batch, integer(8, 1_000_000)),
        micro_batch=(micro_batch, integer(1, 65536)),
        remedy_batch=(remedy_batch, integer(1, 65536)))
