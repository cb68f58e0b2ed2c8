"""Memory tools: configure accelerator memory before TensorFlow starts, measure what a
step uses, search for the largest batch that trains, and reach a large effective batch
in small memory with gradient accumulation.

Used by: 06_out_of_memory.
"""

from __future__ import annotations

import gc
import re
import resource
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from helpers.strategy import LateConfigurationError

LATE_MESSAGE = (
    "GPU memory settings must be applied before TensorFlow's first operation, and this "
    "session has already started its GPUs. Restart the kernel (Colab: Runtime > Restart "
    "session) and run this cell before anything else, or start Python with "
    "TF_FORCE_GPU_ALLOW_GROWTH=true."
)


def configure_gpu_memory(growth: bool = True, limit_mb: int | None = None, gpus=None) -> str:
    """Memory growth, or a hard limit per GPU; says what it did.

    Raises :class:`helpers.strategy.LateConfigurationError` with what to do when
    TensorFlow has already initialised its GPUs, instead of TF's "Physical devices
    cannot be modified after being initialized".
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU") if gpus is None else gpus
    if not gpus:
        return "No GPU: nothing to configure (the CPU uses host memory)."
    try:
        for gpu in gpus:
            if limit_mb:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=int(limit_mb))]
                )
            elif growth:
                tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as error:
        if "initialized" in str(error):
            raise LateConfigurationError(LATE_MESSAGE) from None
        raise
    if limit_mb:
        return f"Each of {len(gpus)} GPU(s) limited to {int(limit_mb)} MiB."
    return f"Memory growth on for {len(gpus)} GPU(s)." if growth else "Defaults kept."


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def device_memory_mb(device: str = "GPU:0") -> dict | None:
    """Current and peak memory TensorFlow holds on a GPU/TPU, in MiB; None on the CPU."""
    import tensorflow as tf

    if device.upper().startswith("CPU"):
        return None
    info = tf.config.experimental.get_memory_info(device)
    return {"current": info["current"] / 2**20, "peak": info["peak"] / 2**20}


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


def accumulated_gradients(model, loss_fn, x, y, micro_batch: int):
    """Gradients of the mean loss over ``x`` computed ``micro_batch`` examples at a time.

    Each micro-batch's gradient is weighted by its share of the examples, so the sum
    equals the full batch's gradient (for models without batch-dependent layers such
    as batch norm). Memory holds one micro-batch's activations at a time.
    """
    import tensorflow as tf

    total = len(x)
    grads = None
    for start in range(0, total, micro_batch):
        xs, ys = x[start : start + micro_batch], y[start : start + micro_batch]
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        part = tape.gradient(loss, model.trainable_variables)
        weight = len(xs) / total
        part = [g * weight for g in part]
        grads = part if grads is None else [a + b for a, b in zip(grads, part, strict=True)]
    return grads


class MemoryBudgetExceeded(MemoryError):
    """A step needed more host memory than the budget allowed (the CPU's stand-in for OOM)."""


class ChildOutOfMemory(MemoryError):
    """The child process ran out of memory (a real OOM on its GPU, or host memory)."""


def current_rss_mb() -> float:
    """The process's resident memory now, in MiB (from /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def child_memory_setup(task: dict, gpus=None) -> str:
    """The child's first act, before any TensorFlow op: memory growth, or a hard limit of
    ``task["gpu_limit_mb"]`` on each GPU, so that a batch too large for the limit fails with a
    real out-of-memory error (the GPU counterpart of the CPU's memory budget)."""
    limit = task.get("gpu_limit_mb")
    return configure_gpu_memory(growth=True, limit_mb=limit, gpus=gpus)


def _child_main(task: dict, queue) -> None:
    """Runs in a fresh process: build a model from helpers.models, train, report, exit."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from helpers.logs import import_tensorflow

        import_tensorflow()
        memory_setting = child_memory_setup(task)
        import keras

        from helpers import models
        from helpers.throughput import precision

        keras.utils.set_random_seed(task.get("seed", 0))
        with precision(task.get("policy")):
            model = models.MODELS[task["model"]](task["x"].shape[1:])
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        before = peak_rss_mb()
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
            gpu_peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        queue.put(
            {
                "history": history.history,
                "weights": model.get_weights(),
                "peak_rss_mb": peak_rss_mb(),
                "step_rss_mb": peak_rss_mb() - before,
                "gpu_peak_mb": gpu_peak,
                "memory_setting": memory_setting,
            }
        )
    except BaseException as error:  # reported to the parent, which raises it
        queue.put({"error": f"{type(error).__name__}: {error}"})


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
    ``step_rss_mb`` is how much the peak resident memory grew during training.
    ``gpu_limit_mb`` caps the child's GPU memory (a logical device limit); without it the
    child's GPU memory grows as needed.
    """
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
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
    child = context.Process(target=_child_main, args=(task, queue), daemon=True)
    child.start()
    try:
        result = queue.get(timeout=timeout)
    finally:
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
    if "error" in result:
        text = result["error"]
        # cuDNN under a tight limit can fail as InternalError "... out of memory"
        if text.startswith(("ResourceExhaustedError", "MemoryError")) or re.search(
            r"\bOOM\b|out of memory", text, re.IGNORECASE
        ):
            raise ChildOutOfMemory(result["error"])
        raise RuntimeError(f"the child process failed: {result['error']}")
    result["exit_code"] = child.exitcode
    return result


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


def estimate_mb(model, batch_size: int, optimizer_slots: int = 2) -> dict:
    """A memory estimate for one training step, by part, in MiB.

    All parameters; gradients and the optimizer's slots (Adam keeps two per weight) for
    the *trainable* ones only, so frozen layers cost just their weights; plus
    activations: every layer's output for ``batch_size`` examples, kept for the backward
    pass. Blog posts' rule of thumb divides memory by the parameter count and forgets
    the activations, which grow with the batch.
    """

    def size(weights) -> int:
        return sum(int(np.prod(w.shape)) * 4 for w in weights)  # float32 variables

    params, trainable = size(model.weights), size(model.trainable_weights)
    activations = 0
    for layer in model.layers:
        shape = layer.output.shape[1:]
        itemsize = 2 if "16" in str(layer.compute_dtype) else 4
        activations += int(np.prod(shape)) * itemsize
    parts = {
        "parameters": params,
        "gradients": trainable,
        "optimizer slots": optimizer_slots * trainable,
        "activations": activations * batch_size,
    }
    out = {name: value / 2**20 for name, value in parts.items()}
    out["total"] = sum(out.values())
    return out
