"""Plumbing of notebook 02 (GPU vs CPU benchmark): the roofline measurements and plot, and the
interactive panel.

Matrix-multiply throughput against the device's published peak.

Achieved TFLOP/s for float32, float16 and bfloat16 over a sweep of sizes, on
each device present; on the CPU, NumPy's BLAS on the same sizes in the same run
is the anchor, since a CPU's peak depends on its exact model and clock.

An ipywidgets panel to run the matmul benchmark interactively in Colab.

The panel only collects choices and calls the same functions the notebook
runs headlessly; without a widget frontend (papermill, nbval) it is built and
shown as text, and never waits for input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from helpers.devices import device_name
from helpers.logs import native_noise_filtered
from helpers.params import all_of, boolean, fits_in_memory, integer, list_of, one_of, validate
from helpers.timing import device_sync, measure, no_sync

DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Peak:
    """Published dense (no sparsity) peak TFLOP/s of one accelerator, per dtype."""

    label: str
    tflops: dict
    source: str


_NVIDIA = "NVIDIA datasheet, dense tensor-core figures (no sparsity)"
_TPU = "Google Cloud TPU system architecture docs, bf16 per core"
_V5E = Peak("TPU v5e core", {"bfloat16": 197}, _TPU)
#: Matched against the device name word by word: the longest pattern found wins.
PEAKS = [
    (
        "H200",
        Peak(
            "NVIDIA H200 SXM",
            {"float32": 67, "tf32": 494.7, "float16": 989.5, "bfloat16": 989.5},
            _NVIDIA,
        ),
    ),
    (
        "H100 PCIe",
        Peak(
            "NVIDIA H100 PCIe",
            {"float32": 51.2, "tf32": 378, "float16": 756, "bfloat16": 756},
            _NVIDIA,
        ),
    ),
    (
        "H100",
        Peak(
            "NVIDIA H100 SXM",
            {"float32": 67, "tf32": 494.7, "float16": 989.5, "bfloat16": 989.5},
            _NVIDIA,
        ),
    ),
    (
        "A100",
        Peak(
            "NVIDIA A100", {"float32": 19.5, "tf32": 156, "float16": 312, "bfloat16": 312}, _NVIDIA
        ),
    ),
    (
        "L4",
        Peak("NVIDIA L4", {"float32": 30.3, "tf32": 60, "float16": 121, "bfloat16": 121}, _NVIDIA),
    ),
    ("V100", Peak("NVIDIA V100 SXM2", {"float32": 15.7, "float16": 125}, _NVIDIA)),
    ("T4", Peak("NVIDIA T4", {"float32": 8.1, "float16": 65}, _NVIDIA)),
    ("P100", Peak("NVIDIA P100 PCIe", {"float32": 9.3, "float16": 18.7}, _NVIDIA)),
    ("TPU v2", Peak("TPU v2 core", {"bfloat16": 22.5}, _TPU)),
    ("TPU v3", Peak("TPU v3 core", {"bfloat16": 61.5}, _TPU)),
    ("TPU v5e", _V5E),
    ("TPU v5litepod", _V5E),  # what TPU_ACCELERATOR_TYPE calls a v5e ("v5litepod-8")
    ("TPU v5 lite", _V5E),
]


def _tokens(name: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", name.lower())


def find_peak(device: str) -> Peak | None:
    """The published peak for a device name such as "Tesla T4" or "TPU v3"; None if unknown.

    A pattern matches whole words of the name, in order ("L4" is not "L40S", "V100" is not
    "V100S", "TPU v5e" is not "TPU v5p"); where several match, the longest wins
    ("H100 PCIe" before "H100"). A device with no entry gets no peak, not a neighbour's.
    """
    words = _tokens(device)
    best, best_length = None, 0
    for pattern, peak in PEAKS:
        wanted = _tokens(pattern)
        n = len(wanted)
        found = any(words[i : i + n] == wanted for i in range(len(words) - n + 1))
        if found and n > best_length:
            best, best_length = peak, n
    return best


def peak_tflops(peak: Peak | None, dtype: str, tf32: bool = False) -> float | None:
    """The peak that applies to ``dtype``; float32 matmuls use TF32 tensor cores when enabled."""
    if peak is None:
        return None
    if dtype == "float32" and tf32 and "tf32" in peak.tflops:
        return peak.tflops["tf32"]
    return peak.tflops.get(dtype)


def tf32_enabled() -> bool:
    """Whether TensorFlow runs float32 matmuls as TF32 on Ampere and newer GPUs (default: on)."""
    import tensorflow as tf

    return bool(tf.config.experimental.tensor_float_32_execution_enabled())


def matmul_sweep(
    sizes, dtypes=DTYPES, kind: str = "cpu", device: str = "CPU", repeats: int = 5
) -> list[dict]:
    """Achieved TFLOP/s of an n x n matmul for each size and dtype on one device.

    ``kind`` picks the device ("cpu", "gpu", "tpu"); ``device`` is its name, used
    to look up the published peak. Each point is a median over ``repeats``
    synced samples after a warm-up (see :mod:`helpers.timing`).
    """
    import tensorflow as tf

    peak = find_peak(device)
    tf32 = kind == "gpu" and tf32_enabled()
    records = []
    with native_noise_filtered(), tf.device(device_name(kind)):
        for dtype in dtypes:
            for n in sizes:
                a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
                b = tf.cast(tf.random.normal((n, n), seed=2), dtype)
                step = tf.function(lambda a=a, b=b: tf.matmul(a, b))
                t = measure(
                    step,
                    name="matmul",
                    device=device,
                    dtype=dtype,
                    repeats=repeats,
                    sync=device_sync,
                    work=2 * n**3,
                    work_unit="FLOP",
                )
                records.append(_record(t, n, kind, peak_tflops(peak, dtype, tf32)))
    return records


def numpy_sweep(sizes, repeats: int = 5, device: str = "CPU") -> list[dict]:
    """The same float32 matmuls with NumPy's BLAS: the CPU anchor, measured in the same run."""
    records = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        t = measure(
            lambda a=a, b=b: a @ b,
            name="numpy matmul",
            device=f"{device} (NumPy BLAS)",
            dtype="float32",
            repeats=repeats,
            sync=no_sync,
            work=2 * n**3,
            work_unit="FLOP",
        )
        records.append(_record(t, n, "cpu", None))
    return records


def _record(t, n: int, kind: str, peak: float | None) -> dict:
    tflops = t.rate / 1e12
    return {
        "name": t.name,
        "device": t.device,
        "kind": kind,
        "dtype": t.dtype,
        "size": n,
        "median_s": t.median_s,
        "iqr_s": t.iqr_s,
        "first_call_s": t.first_call_s,
        "tflops": tflops,
        "peak_tflops": peak,
        "fraction_of_peak": tflops / peak if peak else None,
    }


def table_rows(records: list[dict]) -> list[list]:
    """Rows for a results table: device, dtype, size, median, IQR, TFLOP/s, peak, % of peak."""
    rows = []
    for r in records:
        peak = f"{r['peak_tflops']:g}" if r["peak_tflops"] else "unknown"
        share = f"{100 * r['fraction_of_peak']:.0f}%" if r["fraction_of_peak"] else "-"
        rows.append(
            [
                r["device"],
                r["dtype"],
                r["size"],
                f"{r['median_s'] * 1e3:.3f}",
                f"{r['iqr_s'] * 1e3:.3f}",
                f"{r['tflops']:.3f}",
                peak,
                share,
            ]
        )
    return rows


TABLE_HEADERS = ["device", "dtype", "n", "median ms", "IQR ms", "TFLOP/s", "peak", "of peak"]


def plot(records: list[dict], title: str = "Matmul throughput vs size"):
    """Achieved TFLOP/s against matrix size, one line per device and dtype, peaks dashed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    series = {}
    for r in records:
        series.setdefault((r["device"], r["dtype"]), []).append(r)
    for (device, dtype), points in series.items():
        points.sort(key=lambda r: r["size"])
        (line,) = ax.plot(
            [p["size"] for p in points],
            [p["tflops"] for p in points],
            marker="o",
            label=f"{device} {dtype}",
        )
        if points[0]["peak_tflops"]:
            ax.axhline(
                points[0]["peak_tflops"],
                linestyle="--",
                color=line.get_color(),
                linewidth=1,
                label=f"peak {dtype}",
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("matrix size n (n x n)")
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def tf_vs_numpy(records: list[dict], cpu: str, size: int | None = None) -> dict:
    """TensorFlow's float32 matmul against NumPy's BLAS on the CPU, same size, same run.

    ``size`` defaults to the largest measured.
    """
    size = size or max(r["size"] for r in records)

    def pick(device):
        return next(
            r
            for r in records
            if r["device"] == device and r["dtype"] == "float32" and r["size"] == size
        )

    ours, anchor = pick(cpu), pick(f"{cpu} (NumPy BLAS)")
    gflops, numpy_gflops = ours["tflops"] * 1e3, anchor["tflops"] * 1e3
    return {
        "size": size,
        "tf_gflops": gflops,
        "numpy_gflops": numpy_gflops,
        "ratio": gflops / numpy_gflops,
    }


def summary_lines(records: list[dict], cpu: str) -> list[str]:
    """What the sweep says: TF vs NumPy on the CPU, and the best share of a published peak."""
    cmp = tf_vs_numpy(records, cpu)
    lines = [
        f"CPU float32 at {cmp['size']}x{cmp['size']}: TensorFlow {cmp['tf_gflops']:.0f} GFLOP/s, "
        f"NumPy {cmp['numpy_gflops']:.0f} GFLOP/s, ratio {cmp['ratio']:.2f}."
    ]
    known = [r for r in records if r["fraction_of_peak"]]
    if known:
        best = max(known, key=lambda r: r["fraction_of_peak"])
        lines.append(
            f"Best share of a published peak: {best['fraction_of_peak']:.0%} "
            f"({best['device']}, {best['dtype']}, n={best['size']})."
        )
    else:
        lines.append("No published peak is known for the devices measured here.")
    return lines


SIZES = (256, 512, 1024, 2048, 4096, 8192)


def matmul_panel(kinds: dict[str, str], run: Callable, show: Callable):
    """Build the panel: sizes, dtypes and devices to pick, a Run button, an output area.

    ``kinds`` maps a device kind ("cpu", "gpu", "tpu") to its name; ``run(sizes,
    dtypes, kind, device)`` returns records; ``show(records)`` displays them.
    The returned box has ``.button`` (``.button.click()`` runs it) and ``.records``.
    """
    import ipywidgets as widgets

    sizes = widgets.SelectMultiple(options=SIZES, value=(512, 1024, 2048), description="sizes")
    dtypes = widgets.SelectMultiple(
        options=("float32", "float16", "bfloat16"), value=("float32",), description="dtypes"
    )
    devices = widgets.SelectMultiple(
        options=list(kinds), value=(list(kinds)[-1],), description="devices"
    )
    button = widgets.Button(description="Run", button_style="primary")
    output = widgets.Output()
    box = widgets.VBox([widgets.HBox([sizes, dtypes, devices]), button, output])
    box.records = []

    def on_click(_):
        output.clear_output()
        records = []
        for kind in devices.value:
            records += run(sorted(sizes.value), list(dtypes.value), kind, kinds[kind])
        box.records = records
        with output:
            show(records)

    button.on_click(on_click)
    box.button, box.sizes, box.dtypes, box.devices = button, sizes, dtypes, devices
    return box


def check_parameters(*, sizes, dtypes, repeats, loop_steps, train_images, epochs, batch_size,
                     batch_sizes, interactive):
    """Notebook 02's parameters, checked before any work: one line names a wrong one."""
    return validate(
        sizes=(sizes, list_of(integer(16, 16384), "expected a list of integers from 16 to 16384")),
        dtypes=(dtypes, list_of(one_of(*DTYPES), f"expected a list from {DTYPES}")),
        repeats=(repeats, integer(2, 1000)),
        loop_steps=(loop_steps, integer(2, 100_000)),
        train_images=(train_images, all_of(integer(64, 1_000_000), fits_in_memory(8 * 28 * 28))),
        epochs=(epochs, integer(2, 100)),
        batch_size=(batch_size, integer(1, 65536)),
        batch_sizes=(batch_sizes, list_of(integer(1, 65536), "expected a list of integers >= 1")),
        interactive=(interactive, boolean()),
    )
