"""Training throughput: steady-state epoch time and images/s of ``model.fit``,
and the knobs that change it (device, batch size, mixed precision, XLA).

The first epoch traces and compiles, so it is reported apart; the steady state
is the median of the later epochs. Keras reads the loss back at each epoch's
end, so the epoch clock includes the device's work.
Used by: 02_gpu_vs_cpu_benchmark.
"""

from __future__ import annotations

import statistics
import time

from helpers.devices import device_name
from helpers.precision import mixed_policy_for, precision


def fit_throughput(
    build_model,
    x,
    y,
    *,
    kind: str = "cpu",
    device: str | None = None,
    batch_size: int = 128,
    epochs: int = 3,
    policy: str | None = None,
    jit_compile: bool = False,
    label: str = "",
) -> dict:
    """Train a fresh model from ``build_model()`` on ``kind``'s device and time each epoch.

    ``device`` names the device in the result (default: ``kind``).

    Returns first-epoch seconds, steady-state (median of later epochs) seconds
    and images/s, with the device, batch size, policy and XLA setting.
    """
    import keras
    import tensorflow as tf

    if epochs < 2:
        raise ValueError("epochs must be at least 2: the first epoch compiles")
    timer = epoch_timer()
    strategy = tf.distribute.OneDeviceStrategy(device_name(kind))
    with precision(policy), strategy.scope():
        keras.utils.set_random_seed(0)
        model = build_model()
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=jit_compile
        )
        model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, callbacks=[timer])
    steady = statistics.median(timer.seconds[1:])
    return {
        "label": label or model.name,
        "kind": kind,
        "device": device or kind,
        "batch_size": batch_size,
        "policy": policy or "float32",
        "xla": jit_compile,
        "first_epoch_s": timer.seconds[0],
        "epoch_s": steady,
        "images_per_s": len(x) / steady,
        "epochs": epochs,
    }


def _epoch_timer_class():
    import keras

    class _EpochTimer(keras.callbacks.Callback):
        """Wall-clock seconds of each epoch."""

        def __init__(self):
            super().__init__()
            self.seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)

    return _EpochTimer


def epoch_timer():
    """A Keras callback recording each epoch's wall-clock seconds in ``.seconds``."""
    return _epoch_timer_class()()


def speedup(fast: dict, slow: dict) -> float:
    """How many times more images/s ``fast`` trained than ``slow``."""
    return fast["images_per_s"] / slow["images_per_s"]


RESULT_HEADERS = ["run", "device", "batch", "policy", "XLA", "first epoch s", "epoch s", "images/s"]


def result_rows(results: list[dict]) -> list[list]:
    return [
        [
            r["label"],
            r["device"],
            r["batch_size"],
            r["policy"],
            "on" if r["xla"] else "off",
            f"{r['first_epoch_s']:.2f}",
            f"{r['epoch_s']:.3f}",
            f"{r['images_per_s']:.0f}",
        ]
        for r in results
    ]


def plot_batch_sweep(results: list[dict], title: str = "Throughput vs batch size"):
    """images/s against batch size (log scale)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    results = sorted(results, key=lambda r: r["batch_size"])
    ax.plot([r["batch_size"] for r in results], [r["images_per_s"] for r in results], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("images/s (steady state)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def compare_devices(build_model, x, y, kinds: dict[str, str], **fit_args) -> list[dict]:
    """The same training run on each device kind present (``{"cpu": name, "gpu": name}``)."""
    results = []
    for kind, name in kinds.items():
        results.append(fit_throughput(build_model, x, y, kind=kind, device=name, **fit_args))
    return results


def speedup_lines(results: list[dict]) -> list[str]:
    """What the measurements say: each accelerator's speedup over the CPU, or why there is none."""
    cpu = next((r for r in results if r["kind"] == "cpu"), None)
    others = [r for r in results if r["kind"] != "cpu"]
    if cpu is None or not others:
        return [
            "CPU only: no speedup can be measured on this runtime. In Colab, choose "
            "Runtime > Change runtime type > T4 GPU and run the notebook again."
        ]
    return [
        f"{r['label']}: {r['device']} trained {speedup(r, cpu):.1f}x the images/s of the CPU "
        f"({r['images_per_s']:.0f} vs {cpu['images_per_s']:.0f}, measured in this run)."
        for r in others
    ]


def knob_runs(build_model, x, y, kind: str, **fit_args) -> list[dict]:
    """float32 baseline, the device's mixed-precision policy (where one helps), and XLA."""
    runs = [fit_throughput(build_model, x, y, kind=kind, label="float32", **fit_args)]
    policy = mixed_policy_for(kind)
    if policy:
        runs.append(
            fit_throughput(build_model, x, y, kind=kind, policy=policy, label=policy, **fit_args)
        )
    runs.append(
        fit_throughput(build_model, x, y, kind=kind, jit_compile=True, label="XLA", **fit_args)
    )
    return runs


def knob_lines(runs: list[dict]) -> list[str]:
    """Each knob's effect as a ratio of images/s to the float32 baseline, from this run."""
    base, lines = runs[0], []
    for run in runs[1:]:
        ratio = speedup(run, base)
        verdict = "faster" if ratio > 1.05 else "slower" if ratio < 0.95 else "about the same"
        lines.append(f"{run['label']}: {ratio:.2f}x the float32 images/s ({verdict}).")
    if not any(r["policy"] != "float32" for r in runs):
        lines.append("No mixed-precision policy helps on this device (no native bfloat16/float16).")
    return lines
