import pytest

from helpers import gpu_vs_cpu_benchmark, timing


@pytest.mark.parametrize(
    "name, label",
    [
        ("Tesla T4", "NVIDIA T4"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H200", "NVIDIA H200 SXM"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100"),
        ("NVIDIA L4", "NVIDIA L4"),
        ("Tesla P100-PCIE-16GB", "NVIDIA P100 PCIe"),
        ("TPU v3", "TPU v3 core"),
    ],
)
def test_peaks_are_found_by_device_name(name, label):
    assert gpu_vs_cpu_benchmark.find_peak(name).label == label


@pytest.mark.parametrize(
    "name, label",
    [
        ("NVIDIA L40S", None),  # not the L4's peak: "L4" is a whole word only
        ("NVIDIA L40", None),
        ("Tesla V100S-PCIE-32GB", None),  # not the V100 SXM2
        ("NVIDIA RTX A1000", None),  # not the A100
        ("TPU v5p", None),  # a v5p is not a v5e
        ("TPU v5litepod", "TPU v5e core"),  # TPU_ACCELERATOR_TYPE "v5litepod-8"
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),  # the longest match, not "H100"
    ],
)
def test_peaks_match_whole_words_and_the_longest_pattern_wins(name, label):
    peak = gpu_vs_cpu_benchmark.find_peak(name)
    assert (peak.label if peak else None) == label


def test_unknown_devices_and_dtypes_have_no_peak():
    assert gpu_vs_cpu_benchmark.find_peak("CPU") is None
    assert gpu_vs_cpu_benchmark.peak_tflops(None, "float32") is None
    t4 = gpu_vs_cpu_benchmark.find_peak("Tesla T4")
    assert gpu_vs_cpu_benchmark.peak_tflops(t4, "bfloat16") is None


def test_float32_uses_the_tf32_peak_where_tensor_cores_take_it():
    a100 = gpu_vs_cpu_benchmark.find_peak("NVIDIA A100")
    assert gpu_vs_cpu_benchmark.peak_tflops(a100, "float32", tf32=False) == 19.5
    assert gpu_vs_cpu_benchmark.peak_tflops(a100, "float32", tf32=True) == 156
    t4 = gpu_vs_cpu_benchmark.find_peak("Tesla T4")
    assert gpu_vs_cpu_benchmark.peak_tflops(t4, "float32", tf32=True) == 8.1


def test_sweep_on_this_cpu_measures_numpy_in_the_same_rounds(tf):
    records = gpu_vs_cpu_benchmark.matmul_sweep([32, 64], ["float32", "bfloat16"], repeats=2)
    assert [(r["device"], r["dtype"], r["size"]) for r in records] == [
        ("CPU", "float32", 32),
        ("CPU", "bfloat16", 32),
        ("CPU (NumPy BLAS)", "float32", 32),
        ("CPU", "float32", 64),
        ("CPU", "bfloat16", 64),
        ("CPU (NumPy BLAS)", "float32", 64),
    ]
    for r in records:
        assert r["tflops"] == pytest.approx(2 * r["size"] ** 3 / r["median_s"] / 1e12)
        low, high = r["gflops_range"]
        assert low <= r["tflops"] * 1e3 <= high and len(r["samples_s"]) == 2
        assert r["peak_tflops"] is None and r["fraction_of_peak"] is None
    bf16_only = gpu_vs_cpu_benchmark.matmul_sweep([32], ["bfloat16"], repeats=2)
    assert [r["device"] for r in bf16_only] == ["CPU"]  # NumPy only beside float32


def test_alternately_takes_turns_and_lets_blas_threads_idle(monkeypatch):
    log, sleeps = [], []
    monkeypatch.setattr(gpu_vs_cpu_benchmark.time, "sleep", sleeps.append)
    calls = {"tf": (lambda: log.append("tf"), lambda: log.append("sync")),
             "numpy": (lambda: log.append("numpy"), timing.no_sync)}
    timings = gpu_vs_cpu_benchmark.alternately(calls, repeats=3, work=10)
    warm = ["tf", "sync", "tf", "sync", "numpy", "numpy"]  # an untimed call before each sample
    assert log == ["tf", "sync", "numpy"] + warm * 4  # first calls, warm-up, 3 timed rounds
    assert sleeps == [0, gpu_vs_cpu_benchmark.BLAS_IDLE_S] * 5  # idle after each NumPy call
    assert all(len(t.samples_s) == 3 and t.work == 10 for t in timings.values())
    log.clear()
    cold = gpu_vs_cpu_benchmark.alternately(calls, repeats=2, warm=False)  # 03's epochs
    assert log == ["tf", "sync", "numpy"] * 3  # first calls, then 2 timed rounds, nothing untimed
    assert all(len(t.samples_s) == 2 for t in cold.values())


def test_numpy_anchor_and_table_and_plot(tf):
    records = [r for r in gpu_vs_cpu_benchmark.matmul_sweep([32, 64], ["float32"], repeats=2)
               if "numpy" in r["name"]]
    assert {r["device"] for r in records} == {"CPU (NumPy BLAS)"}
    rows = gpu_vs_cpu_benchmark.table_rows(records)
    assert rows[0][:3] == ["CPU (NumPy BLAS)", "float32", 32] and rows[0][5] == "unknown"
    ax = gpu_vs_cpu_benchmark.plot(records).axes[0]
    assert ax.get_xlabel().startswith("matrix size") and ax.get_ylabel().startswith("GFLOP/s")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["32", "64"]  # the sizes, as ticks
    assert ax.containers  # the min-max bars
    assert rows[0][3] == gpu_vs_cpu_benchmark.median_range(records[0]["samples_s"], 3)


def test_samples_that_all_tie_keep_the_rate_within_its_range():
    """Equal samples put the median on an end: rounding once left the rate 1 ulp outside its
    range, a negative error bar that matplotlib refuses (a 32x32 matmul timed twice can tie)."""
    records = [gpu_vs_cpu_benchmark._record(timing.Timing(1.0, [s, s], work=2 * n**3),
                                            "numpy matmul", "CPU", "float32", n, "cpu")
               for n in (32, 48, 64, 96, 128) for s in (3e-6, 1.704004047509577e-05, 0.1)]
    for r in records:
        low, high = r["gflops_range"]
        assert low <= r["tflops"] * 1e3 <= high
    assert gpu_vs_cpu_benchmark.plot(records).axes[0].containers


def test_a_known_peak_gives_a_fraction():
    timed = timing.Timing(2.0, [0.5, 1.0, 1.5], work=4e12)
    record = gpu_vs_cpu_benchmark._record(timed, "m", "Tesla T4", "float16", 4096, "gpu", 65)
    assert record["fraction_of_peak"] == pytest.approx(4 / 65)
    assert record["device"] == "Tesla T4" and record["dtype"] == "float16"
    assert record["gflops_range"] == pytest.approx((4e3 / 1.5, 4e3 / 0.5))


def test_tf_vs_numpy_and_summary_lines():
    def rec(device, size, tflops, fraction=None, samples_s=(1.0,) * 5):
        name = "numpy matmul" if "NumPy" in device else "matmul"
        return {"name": name, "device": device, "dtype": "float32", "size": size,
                "tflops": tflops, "fraction_of_peak": fraction, "samples_s": list(samples_s)}

    records = [
        rec("CPU", 64, 0.1, samples_s=[1.0, 1.1, 0.9, 1.0, 1.0]),
        rec("CPU", 128, 0.4, samples_s=[1.0] * 5),
        rec("CPU (NumPy BLAS)", 64, 0.1, samples_s=[1.1, 1.0, 1.0, 1.0, 0.9]),
        rec("CPU (NumPy BLAS)", 128, 0.5),  # an earlier measurement: the last one counts
        rec("CPU (NumPy BLAS)", 128, 0.2, samples_s=[2.0, 2.2, 1.8, 2.0, 2.0]),
        rec("CPU", 256, 0.4),  # no NumPy at 256: not compared
    ]
    cmp = gpu_vs_cpu_benchmark.tf_vs_numpy(records, "CPU")[-1]
    assert cmp["size"] == 128 and cmp["tf_gflops"] == pytest.approx(400)
    assert cmp["reading"] == "2.00x (1.80-2.20x), faster in every round"  # NumPy's s over TF's
    lines = gpu_vs_cpu_benchmark.summary_lines(records, "CPU")
    assert lines[0] == (
        "CPU float32 at 128x128, measured alternately: TensorFlow 400.0 GFLOP/s, NumPy "
        "200.0 GFLOP/s (medians); TensorFlow's rate over NumPy's, round by round: 2.00x "
        "(1.80-2.20x), faster in every round.")
    assert lines[1].startswith("CPU float32 at 64x64") and lines[1].endswith(
        "1.00x (0.90-1.11x), no clear difference (the rounds disagree, or come within 3%).")
    assert lines[2].startswith("No published peak")
    records.append({**rec("Tesla T4", 128, 6.5, 0.1), "dtype": "float16"})
    lines = gpu_vs_cpu_benchmark.summary_lines(records, "CPU")
    assert "10% (Tesla T4, float16, n=128)" in lines[-1]
    slower = [rec("CPU", 64, 0.1, samples_s=[2.0] * 5), rec("CPU (NumPy BLAS)", 64, 0.2)]
    assert gpu_vs_cpu_benchmark.tf_vs_numpy(slower, "CPU")[0]["reading"] == (
        "0.50x (0.50-0.50x), slower in every round")
    assert gpu_vs_cpu_benchmark.tf_vs_numpy(slower[:1], "CPU") == []
    few = [rec("CPU", 64, 0.1, samples_s=[1.0, 1.0]),
           rec("CPU (NumPy BLAS)", 64, 0.5, samples_s=[5.0, 5.0])]
    assert gpu_vs_cpu_benchmark.tf_vs_numpy(few, "CPU")[0]["reading"] == (
        "5.00x (5.00-5.00x), too few rounds (2) to tell: pass repeats >= 5")
    assert gpu_vs_cpu_benchmark.summary_lines(slower[:1], "CPU") == [
        "No published peak is known for the devices measured here."]


@pytest.mark.parametrize(("values", "says"), [
    ([2, 3, 4, 3, 2], "2.00x (1.50-2.00x), faster in every round"),  # over [1, 2, 2, 2, 1]
    ([0.5, 1, 1, 1, 0.5], "0.50x (0.50-0.50x), slower in every round"),
    ([2, 1, 2, 2, 1], "1.00x (0.50-2.00x), no clear difference (the rounds disagree, or come "
     "within 3%)"),
    ([2, 4], "2.00x (2.00-2.00x), too few rounds (2) to tell: pass rounds >= 5"),
])
def test_versus_is_the_one_verdict_on_rounds_timed_in_turn(values, says):
    assert gpu_vs_cpu_benchmark.versus(values, [1, 2, 2, 2, 1][:len(values)]) == says
