"""Plumbing of notebook 02 (GPU vs CPU benchmark): matmul throughput per dtype and size against
each device's published peak (NumPy's BLAS as the CPU's anchor), its table, plot and panel."""

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
TABLE_HEADERS = ["device", "dtype", "n", "median ms", "IQR ms", "TFLOP/s", "peak", "of peak"]


@dataclass(frozen=True)
class Peak:
    """Published dense peak TFLOP/s of one accelerator, per dtype: NVIDIA's datasheets (tensor
    cores, no sparsity), Google Cloud's TPU system architecture docs (bfloat16, per core)."""

    label: str
    tflops: dict


def _nvidia(label: str, float32: float, float16: float, tf32: float | None = None) -> Peak:
    """A GPU's peak; one with TF32 tensor cores (Ampere and newer) runs bfloat16 as float16."""
    tensor_cores = {"tf32": tf32, "bfloat16": float16} if tf32 else {}
    return Peak(f"NVIDIA {label}", {"float32": float32, "float16": float16, **tensor_cores})


_V5E = Peak("TPU v5e core", {"bfloat16": 197})
PEAKS = [  # (pattern, peak): see find_peak
    ("H200", _nvidia("H200 SXM", 67, 989.5, tf32=494.7)),
    ("H100 PCIe", _nvidia("H100 PCIe", 51.2, 756, tf32=378)),
    ("H100", _nvidia("H100 SXM", 67, 989.5, tf32=494.7)),
    ("A100", _nvidia("A100", 19.5, 312, tf32=156)),
    ("L4", _nvidia("L4", 30.3, 121, tf32=60)),
    ("V100", _nvidia("V100 SXM2", 15.7, 125)),
    ("T4", _nvidia("T4", 8.1, 65)),
    ("P100", _nvidia("P100 PCIe", 9.3, 18.7)),
    ("TPU v2", Peak("TPU v2 core", {"bfloat16": 22.5})),
    ("TPU v3", Peak("TPU v3 core", {"bfloat16": 61.5})),
    ("TPU v5e", _V5E),
    ("TPU v5litepod", _V5E),  # what TPU_ACCELERATOR_TYPE calls a v5e ("v5litepod-8")
    ("TPU v5 lite", _V5E),
]


def _words(name: str) -> str:
    return f" {' '.join(re.findall(r'[a-z0-9]+', name.lower()))} "


def find_peak(device: str) -> Peak | None:
    """The published peak for a device name such as "Tesla T4"; None if unknown. A pattern
    matches whole words, in order ("L4" is not "L40S"); the longest match wins."""
    found = [(len(_words(p)), peak) for p, peak in PEAKS if _words(p) in _words(device)]
    return max(found, key=lambda match: match[0], default=(0, None))[1]


def peak_tflops(peak: Peak | None, dtype: str, tf32: bool = False) -> float | None:
    """The peak that applies to ``dtype``; float32 matmuls use TF32 tensor cores when enabled."""
    if peak is None:
        return None
    return peak.tflops.get("tf32" if dtype == "float32" and tf32 and "tf32" in peak.tflops
                           else dtype)


def matmul_sweep(sizes, dtypes=DTYPES, kind: str = "cpu", device: str = "CPU",
                 repeats: int = 5) -> list[dict]:
    """Achieved TFLOP/s of n x n matmuls per dtype and size on ``kind``, named ``device``."""
    import tensorflow as tf

    peak = find_peak(device)
    tf32 = kind == "gpu" and bool(tf.config.experimental.tensor_float_32_execution_enabled())
    records = []
    with native_noise_filtered(), tf.device(device_name(kind)):
        for dtype in dtypes:
            for n in sizes:
                a = tf.cast(tf.random.normal((n, n), seed=1), dtype)
                b = tf.cast(tf.random.normal((n, n), seed=2), dtype)
                step = tf.function(lambda a=a, b=b: tf.matmul(a, b))
                t = measure(step, repeats=repeats, sync=device_sync, work=2 * n**3)
                peak_now = peak_tflops(peak, dtype, tf32)
                records.append(_record(t, "matmul", device, dtype, n, kind, peak_now))
    return records


def numpy_sweep(sizes, repeats: int = 5, device: str = "CPU") -> list[dict]:
    """The same float32 matmuls with NumPy's BLAS: the CPU anchor, measured in the same run."""
    records = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = rng.standard_normal((2, n, n), dtype=np.float32)
        t = measure(lambda a=a, b=b: a @ b, repeats=repeats, sync=no_sync, work=2 * n**3)
        records.append(_record(t, "numpy matmul", f"{device} (NumPy BLAS)", "float32", n, "cpu"))
    return records


def _record(t, name: str, device: str, dtype: str, n: int, kind: str, peak=None) -> dict:
    tflops = t.rate / 1e12
    return {"name": name, "device": device, "kind": kind, "dtype": dtype, "size": n,
            "median_s": t.median_s, "iqr_s": t.iqr_s, "first_call_s": t.first_call_s,
            "tflops": tflops, "peak_tflops": peak,
            "fraction_of_peak": tflops / peak if peak else None}


def table_rows(records: list[dict]) -> list[list]:
    return [[r["device"], r["dtype"], r["size"], f"{r['median_s'] * 1e3:.3f}",
             f"{r['iqr_s'] * 1e3:.3f}", f"{r['tflops']:.3f}",
             f"{r['peak_tflops']:g}" if r["peak_tflops"] else "unknown",
             f"{100 * r['fraction_of_peak']:.0f}%" if r["fraction_of_peak"] else "-"]
            for r in records]


def plot(records: list[dict], title: str = "Matmul throughput vs size"):
    """Achieved TFLOP/s against matrix size, one line per device and dtype, peaks dashed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    series = {}
    for r in sorted(records, key=lambda r: r["size"]):
        series.setdefault((r["device"], r["dtype"]), []).append(r)
    for (device, dtype), points in series.items():
        (line,) = ax.plot([p["size"] for p in points], [p["tflops"] for p in points], marker="o",
                          label=f"{device} {dtype}")
        if points[0]["peak_tflops"]:
            ax.axhline(points[0]["peak_tflops"], linestyle="--", color=line.get_color(),
                       linewidth=1, label=f"peak {dtype}")
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="matrix size n (n x n)", ylabel="TFLOP/s (median)", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def tf_vs_numpy(records: list[dict], cpu: str) -> dict:
    """TensorFlow's float32 matmul against NumPy's BLAS on the CPU, at the largest size."""
    size = max(r["size"] for r in records)
    gflops, numpy_gflops = (
        next(r["tflops"] * 1e3 for r in records
             if r["device"] == device and r["dtype"] == "float32" and r["size"] == size)
        for device in (cpu, f"{cpu} (NumPy BLAS)"))
    return {"size": size, "tf_gflops": gflops, "numpy_gflops": numpy_gflops,
            "ratio": gflops / numpy_gflops}


def summary_lines(records: list[dict], cpu: str) -> list[str]:
    """What the sweep says: TF vs NumPy on the CPU, and the best share of a published peak."""
    cmp = tf_vs_numpy(records, cpu)
    lines = [f"CPU float32 at {cmp['size']}x{cmp['size']}: TensorFlow {cmp['tf_gflops']:.0f} "
             f"GFLOP/s, NumPy {cmp['numpy_gflops']:.0f} GFLOP/s, ratio {cmp['ratio']:.2f}."]
    known = [r for r in records if r["fraction_of_peak"]]
    if not known:
        return lines + ["No published peak is known for the devices measured here."]
    best = max(known, key=lambda r: r["fraction_of_peak"])
    return lines + [f"Best share of a published peak: {best['fraction_of_peak']:.0%} "
                    f"({best['device']}, {best['dtype']}, n={best['size']})."]


def matmul_panel(kinds: dict[str, str], run: Callable, show: Callable):
    """Sizes, dtypes, devices to pick; ``.button`` calls ``run`` per device, then ``show``."""
    import ipywidgets as widgets

    sizes = widgets.SelectMultiple(options=(256, 512, 1024, 2048, 4096, 8192),
                                   value=(512, 1024, 2048), description="sizes")
    dtypes = widgets.SelectMultiple(options=DTYPES, value=("float32",), description="dtypes")
    devices = widgets.SelectMultiple(options=list(kinds), value=(list(kinds)[-1],),
                                     description="devices")
    button = widgets.Button(description="Run", button_style="primary")
    output = widgets.Output()
    box = widgets.VBox([widgets.HBox([sizes, dtypes, devices]), button, output])
    box.records = []

    def on_click(_):
        output.clear_output()
        box.records = [record for kind in devices.value for record in
                       run(sorted(sizes.value), list(dtypes.value), kind, kinds[kind])]
        with output:
            show(box.records)

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
