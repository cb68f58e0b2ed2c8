"""Notebook 02's plumbing: matmuls against each device's published peak and NumPy's, alternated;
the course's one harness for timing calls in turn, and its one verdict on what they measured."""

import re
import statistics
import time
from collections import namedtuple

import numpy as np

from helpers.devices import device_name
from helpers.display import subplots
from helpers.logs import native_noise_filtered
from helpers.params import all_of, fits_in_memory, integer, list_of, one_of, validate
from helpers.timing import Timing, device_sync, no_sync

DTYPES = ("float32", "float16", "bfloat16")
TABLE_HEADERS = ["device", "dtype", "n", "ms: median (min-max)", "GFLOP/s", "peak", "of peak"]
MIN_ROUNDS = 5  # fewer rounds all agree by chance too often (1 in 8); fewer samples, no verdict
CLEAR = 1.03  # and every round more than 3% from the level: a smaller gap is called neither way
BLAS_IDLE_S = 0.15  # OpenBLAS's threads spin ~0.1 s after a NumPy call, taking a core from TF
# Published dense peak TFLOP/s per dtype: NVIDIA's datasheets (tensor cores, no sparsity), Google
Peak = namedtuple("Peak", "label tflops")  # Cloud's TPU architecture docs (bfloat16, per core)


def _nvidia(label: str, float32: float, float16: float, tf32: float | None = None) -> Peak:
    """A GPU's peak; one with TF32 tensor cores (Ampere and newer) runs bfloat16 as float16."""
    tensor_cores = {"tf32": tf32, "bfloat16": float16} if tf32 else {}
    return Peak(f"NVIDIA {label}", {"float32": float32, "float16": float16, **tensor_cores})


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
    *[(name, Peak("TPU v5e core", {"bfloat16": 197}))  # "v5litepod-8": TPU_ACCELERATOR_TYPE's
      for name in ("TPU v5e", "TPU v5litepod", "TPU v5 lite")],
]


def _words(name: str) -> str:
    return f" {' '.join(re.findall(r'[a-z0-9]+', name.lower()))} "


def find_peak(device: str) -> Peak | None:
    """A device's peak ("Tesla T4"), or None: the longest whole-word match (L4, not L40S)."""
    found = [(len(_words(p)), peak) for p, peak in PEAKS if _words(p) in _words(device)]
    return max(found, key=lambda match: match[0], default=(0, None))[1]


def peak_tflops(peak: Peak | None, dtype: str, tf32: bool = False) -> float | None:
    """The peak that applies to ``dtype``; float32 matmuls use TF32 tensor cores when enabled."""
    return peak and peak.tflops.get("tf32" if dtype == "float32" and tf32 and "tf32" in
                                    peak.tflops else dtype)


def alternately(calls: dict, repeats: int, work: float | None = None,
                warm: bool = True) -> dict[str, Timing]:
    """Time ``calls`` {name: (fn, sync)} in turn, in rounds, by ``time_calls``' rules; with
    ``warm=False``, no warm-up round and no untimed calls (a call that is a whole epoch, 03)."""
    samples = {name: [] for name in calls}
    for r in range(repeats + 1 + warm):  # the first calls, a warm-up round, the timed rounds
        for name, (fn, sync) in calls.items():
            if r and warm:  # an untimed call just before: every sample timed warm (threads awake)
                fn()
                sync()
            start = time.perf_counter()
            fn()
            sync()
            samples[name].append(time.perf_counter() - start)
            time.sleep(BLAS_IDLE_S if sync is no_sync else 0)  # NumPy's: let OpenBLAS idle
    return {name: Timing(s[0], s[1 + warm:], work) for name, s in samples.items()}


def matmul_sweep(sizes, dtypes=DTYPES, kind: str = "cpu", device: str = "CPU",
                 repeats: int = 5) -> list[dict]:
    """n x n matmuls on ``kind``: per size its dtypes and, on the CPU, NumPy's BLAS, alternately."""
    import tensorflow as tf

    peak = find_peak(device)
    tf32 = kind == "gpu" and bool(tf.config.experimental.tensor_float_32_execution_enabled())
    records = []
    with native_noise_filtered(), tf.device(device_name(kind)):
        for n in sizes:
            a, b = np.random.default_rng(0).standard_normal((2, n, n), dtype=np.float32)
            pairs = {dtype: (tf.cast(a, dtype), tf.cast(b, dtype)) for dtype in dtypes}
            calls = {dtype: (tf.function(lambda p=p: tf.matmul(*p)), device_sync)
                     for dtype, p in pairs.items()}
            if kind == "cpu" and "float32" in dtypes:
                calls["numpy"] = (lambda a=a, b=b: a @ b, no_sync)
            for dtype, t in alternately(calls, repeats, work=2 * n**3).items():
                records.append(_record(t, "matmul", device, dtype, n, kind, peak_tflops(
                    peak, dtype, tf32)) if dtype != "numpy" else _record(
                    t, "numpy matmul", f"{device} (NumPy BLAS)", "float32", n, kind))
    return records


def _record(t, name: str, device: str, dtype: str, n: int, kind: str, peak=None) -> dict:
    tflops, slowest, fastest = t.rate / 1e12, max(t.samples_s), min(t.samples_s)
    gflops = tflops * 1e3  # the range's ends bracket it, even where rounding puts a tie 1 ulp out
    return {"name": name, "device": device, "kind": kind, "dtype": dtype, "size": n,
            "median_s": t.median_s, "samples_s": t.samples_s,
            "tflops": tflops, "gflops_range": (min(t.work / slowest / 1e9, gflops),
                                               max(t.work / fastest / 1e9, gflops)),
            "peak_tflops": peak, "fraction_of_peak": tflops / peak if peak else None}


def table_rows(records: list[dict]) -> list[list]:
    return [[r["device"], r["dtype"], r["size"], median_range(r["samples_s"], 3),
             f"{r['tflops'] * 1e3:,.1f}",
             f"{r['peak_tflops'] * 1e3:,.0f}" if r["peak_tflops"] else "unknown",
             f"{100 * r['fraction_of_peak']:.0f}%" if r["fraction_of_peak"] else "-"]
            for r in records]


def plot(records: list[dict], title: str = "Matmul throughput by size"):
    """GFLOP/s (median, min-max bars) against matrix size, a line per device and dtype; peaks."""
    from matplotlib.ticker import LogLocator

    fig, ax = subplots(figsize=(7, 4), layout="tight")
    for key in dict.fromkeys((r["device"], r["dtype"]) for r in records):
        points = sorted((r for r in records if (r["device"], r["dtype"]) == key),
                        key=lambda r: r["size"])
        mid, (low, high) = (np.array([p["tflops"] * 1e3 for p in points]),
                            np.transpose([p["gflops_range"] for p in points]))
        line = ax.errorbar([p["size"] for p in points], mid, yerr=[mid - low, high - mid],
                           marker="o", capsize=3, label=" ".join(key)).lines[0]
        if peak := points[0]["peak_tflops"]:
            ax.axhline(peak * 1e3, linestyle="--", color=line.get_color(), linewidth=1,
                       label=f"peak: {' '.join(key)}")
    ax.set(xscale="log", yscale="log", xlabel="matrix size n (n x n)",
           ylabel="GFLOP/s (median, min-max bars)", title=title)
    ax.set_xticks(sizes := sorted({r["size"] for r in records}), [str(s) for s in sizes])
    ax.minorticks_off()
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))  # readable: 1, 2, 5, 10, 20, ...
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    ax.legend(fontsize=7)
    return fig


def too_few(samples: int) -> str:
    """Why ``samples`` timed calls are too few to judge a difference from, or ''."""
    return "" if samples >= MIN_ROUNDS else (f"{samples} samples each, too few to judge a "
                                             f"difference from: pass repeats >= {MIN_ROUNDS}")


def called(ratios, level: float = 1.0, ways=("faster", "slower"),
           more: str = f"pass epochs >= {MIN_ROUNDS + 1}") -> str:
    """``ratios``, one a round, against ``level``: the course's rule (5+ rounds, all over 3%
    as the tables print them, to two decimals, so that none prints on the line)."""
    low, high = round(min(ratios) / level, 2), round(max(ratios) / level, 2)
    way = ways[0] if low > CLEAR else ways[1] if high < round(1 / CLEAR, 2) else ""
    return (f"too few rounds ({len(ratios)}) to tell: {more}" if len(ratios) < MIN_ROUNDS
            else f"{way} in every round" if way else
            "no clear difference (the rounds disagree, or come within 3%)")


def versus(values, base, ways=("faster", "slower"), more: str = f"pass rounds >= {MIN_ROUNDS}"):
    """``values`` over ``base``'s, timed in the same rounds: the ratios and the verdict."""
    ratios = np.divide(values, base)  # round i of each: one pair, taken in turns
    return f"{median_range(ratios, 2, 1, 'x')}, {called(ratios, ways=ways, more=more)}"


def median_range(values, digits: int = 0, scale: float = 1e3, unit: str = "") -> str:
    """``values`` as 'median (min-max)', by default seconds in milliseconds: every table's."""
    v = sorted(x * scale for x in values)
    return f"{statistics.median(v):.{digits}f}{unit} ({v[0]:.{digits}f}-{v[-1]:.{digits}f}{unit})"


def in_turns(runs: dict, unit: str, more: str = f"pass rounds >= {MIN_ROUNDS}") -> str:
    """{name: [a value a round]}, timed in turns: medians (min-max), the first against the rest."""
    (a, xs), *rest = runs.items()
    said = "; ".join(f"{name}: {median_range(v, 0, 1)} {unit}" for name, v in runs.items())
    return f"{said}: " + "; ".join(versus(xs, ys, (f"{a} above {b}", f"{a} below {b}"), more)
                                   for b, ys in rest)


def tf_vs_numpy(records: list[dict], cpu: str) -> list[dict]:
    """TF's float32 CPU matmul against NumPy's at each size with both (the last records count)."""
    pair = {(r["size"], r["name"]): r for r in records
            if r["dtype"] == "float32" and r["device"] in (cpu, f"{cpu} (NumPy BLAS)")}
    found = []
    for n in sorted(n for n, name in pair if name == "matmul" and (n, "numpy matmul") in pair):
        tf_r, np_r = pair[n, "matmul"], pair[n, "numpy matmul"]
        found.append({"size": n, "tf_gflops": tf_r["tflops"] * 1e3,
                      "numpy_gflops": np_r["tflops"] * 1e3,  # TF's rate over NumPy's, by round:
                      "reading": versus(np_r["samples_s"], tf_r["samples_s"],
                                        more=f"pass repeats >= {MIN_ROUNDS}")})
    return found


def summary_lines(records: list[dict], cpu: str) -> list[str]:
    """What the sweep says: TF vs NumPy on the CPU, and the best share of a published peak."""
    best = max((r for r in records if r["fraction_of_peak"]), default=None,
               key=lambda r: r["fraction_of_peak"])
    lines = [f"Best share of a published peak: {best['fraction_of_peak']:.0%} ({best['device']}, "
             f"{best['dtype']}, n={best['size']})." if best else
             "No published peak is known for the devices measured here."]
    return [f"CPU float32 at {c['size']}x{c['size']}, measured alternately: TensorFlow "
            f"{c['tf_gflops']:,.1f} GFLOP/s, NumPy {c['numpy_gflops']:,.1f} GFLOP/s (medians); "
            f"TensorFlow's rate over NumPy's, round by round: {c['reading']}."
            for c in tf_vs_numpy(records, cpu)[::-1]] + lines


def ratio_lines(rates: dict, pairs: list[tuple[str, str]]) -> list[str]:
    """Per (run, baseline) trained in the same rounds: their images/s ratios and the verdict."""
    return [f"{label} over {base}, images/s in the rounds after the first: "
            f"{versus(rates[label], rates[base], more=f'pass epochs >= {MIN_ROUNDS + 1}')}."
            for label, base in pairs]


def plot_rates(rates: dict, panels: dict, title: str = ""):
    """Bars of median images/s, min-max over the rounds, a panel per {x label: [run labels]}."""
    widths = [max(4.5, 1.2 * len(labels)) for labels in panels.values()]  # long labels: room
    fig, axes = subplots(1, len(panels), figsize=(sum(widths), 3.8), squeeze=False,
                         layout="tight", width_ratios=widths)
    for ax, (xlabel, labels) in zip(axes[0], panels.items(), strict=True):
        low, mid, high = np.percentile([rates[k] for k in labels], [0, 50, 100], axis=1)
        bars = ax.bar(labels, mid, yerr=[mid - low, high - mid], capsize=4)
        ax.bar_label(bars, fmt="%.0f", padding=4)
        ax.set_xticks(labels, labels, rotation=25, ha="right")
        ax.set(xlabel=xlabel, ylabel="images/s (median, min-max bars)")
    fig.suptitle(title)
    return fig


def plot_timelines(timelines: dict, title: str = ""):
    """A lane per loop {name: [(call returned, value read) per step]}, from the last event."""
    fig, ax = subplots(figsize=(8, 1.2 + 0.9 * len(timelines)), layout="tight")
    for lane, times in enumerate(timelines.values()):
        returned, read = np.transpose(times) * 1e3
        events = np.sort(np.concatenate([[0.0], returned, read]))
        for colour, (ends, what) in enumerate(((returned, "in the step's call, until it returned"),
                                               (read, "waiting for its value"))):
            begins = events[np.searchsorted(events, ends) - 1]
            ax.broken_barh(np.c_[begins, ends - begins], (lane - 0.35, 0.7), color=f"C{colour}",
                           label=what if lane == 0 else "", linewidth=0)
    ax.set_yticks(range(len(timelines)), list(timelines))
    ax.set(xlabel="ms since the loop began", title=title, ylim=(len(timelines) - 0.5, -0.5))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2)
    return fig


def check_parameters(*, sizes, dtypes, repeats, loop_steps, train_images, epochs, batch_size,
                     batch_sizes, sweep_devices):
    """Notebook 02's parameters, checked before any work: one line names a wrong one."""
    most = train_images if isinstance(train_images, int) and 64 <= train_images < 65536 else 65536
    return validate(
        sizes=(sizes, list_of(integer(16, 16384), "expected a list of integers from 16 to 16384")),
        dtypes=(dtypes, list_of(one_of(*DTYPES), f"expected a list from {DTYPES}")),
        repeats=(repeats, integer(2, 1000)),
        loop_steps=(loop_steps, integer(2, 100_000)),
        train_images=(train_images, all_of(integer(64, 1_000_000), fits_in_memory(8 * 28 * 28))),
        epochs=(epochs, integer(2, 100)),
        batch_size=(batch_size, integer(1, most)),  # at most the images it trains on
        batch_sizes=(batch_sizes, list_of(integer(1, most), f"expected integers from 1 to {most}")),
        sweep_devices=(sweep_devices, list_of(one_of("cpu", "gpu", "tpu"),
                                              'expected a list from ("cpu", "gpu", "tpu")')))
