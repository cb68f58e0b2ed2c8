import pytest

from helpers import gpu_vs_cpu_benchmark


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


def test_sweep_on_this_cpu(tf):
    records = gpu_vs_cpu_benchmark.matmul_sweep([32, 64], ["float32", "bfloat16"], repeats=2)
    assert [(r["dtype"], r["size"]) for r in records] == [
        ("float32", 32),
        ("float32", 64),
        ("bfloat16", 32),
        ("bfloat16", 64),
    ]
    for r in records:
        assert r["tflops"] == pytest.approx(2 * r["size"] ** 3 / r["median_s"] / 1e12)
        assert r["peak_tflops"] is None and r["fraction_of_peak"] is None


def test_numpy_anchor_and_table_and_plot(tf):
    records = gpu_vs_cpu_benchmark.numpy_sweep([32, 64], repeats=2)
    assert {r["device"] for r in records} == {"CPU (NumPy BLAS)"}
    rows = gpu_vs_cpu_benchmark.table_rows(records)
    assert rows[0][:3] == ["CPU (NumPy BLAS)", "float32", 32] and rows[0][6] == "unknown"
    fig = gpu_vs_cpu_benchmark.plot(records)
    assert fig.axes[0].get_xlabel().startswith("matrix size")


def test_a_known_peak_gives_a_fraction():
    timed = type("T", (), {"rate": 4e12, "median_s": 1.0, "iqr_s": 0.0, "first_call_s": 2.0})()
    record = gpu_vs_cpu_benchmark._record(timed, "m", "Tesla T4", "float16", 4096, "gpu", 65)
    assert record["fraction_of_peak"] == pytest.approx(4 / 65)
    assert record["device"] == "Tesla T4" and record["dtype"] == "float16"


def test_tf_vs_numpy_and_summary_lines():
    def rec(device, size, tflops, fraction=None):
        return {
            "device": device,
            "dtype": "float32",
            "size": size,
            "tflops": tflops,
            "fraction_of_peak": fraction,
        }

    records = [
        rec("CPU", 64, 0.1),
        rec("CPU", 128, 0.4),
        rec("CPU (NumPy BLAS)", 64, 0.1),
        rec("CPU (NumPy BLAS)", 128, 0.2),
    ]
    cmp = gpu_vs_cpu_benchmark.tf_vs_numpy(records, "CPU")
    assert cmp["size"] == 128 and cmp["ratio"] == pytest.approx(2.0)
    lines = gpu_vs_cpu_benchmark.summary_lines(records, "CPU")
    assert (
        lines[0] == "CPU float32 at 128x128: TensorFlow 400 GFLOP/s, NumPy 200 GFLOP/s, ratio 2.00."
    )
    assert lines[1].startswith("No published peak")
    records.append({**rec("Tesla T4", 128, 6.5, 0.1), "dtype": "float16"})
    assert "10% (Tesla T4, float16, n=128)" in gpu_vs_cpu_benchmark.summary_lines(records, "CPU")[1]
