import json
import re

import pytest

from helpers import scale_out_profile
from helpers.devices import nvidia_smi
from tools import bench

# make bench's own tests (see pyproject.toml): make bench-test runs them, and CI after make test
pytestmark = pytest.mark.bench


def test_record_has_a_ratio_only_with_a_baseline():
    plain = bench.record("x", "CPU", "m", 2.0, "GFLOP/s")
    assert set(plain) == {"name", "device", "metric", "value", "unit"}
    with_base = bench.record("x", "CPU", "m", 3.0, "GFLOP/s", "numpy", 2.0)
    assert with_base["ratio"] == pytest.approx(1.5) and with_base["baseline"] == "numpy"


def test_matmul_benchmark_records(tf):
    records = bench.bench_matmul(cpu_sizes=(32, 64), accelerator_sizes=(128,), repeats=2)
    first = records[0]
    assert first["name"] == "matmul_fp32_vs_numpy" and first["unit"] == "GFLOP/s"
    assert first["ratio"] == pytest.approx(first["value"] / first["baseline_value"])
    names = {r["name"] for r in records}
    assert {"matmul_roofline_float32_64", "matmul_roofline_bfloat16_32"} <= names
    cpu_roofline = next(r for r in records if r["name"] == "matmul_roofline_float32_64")
    assert "baseline" not in cpu_roofline  # no published peak for a CPU: no invented ratio
    for accelerator in (r for r in records if r["name"].endswith("_128")):  # GPU/TPU present
        assert accelerator["device"] != first["device"] and accelerator["value"] > 0


def test_write_json_and_markdown(tmp_path):
    records = [bench.record("a", "CPU", "m", 1.23456, "GFLOP/s", "numpy", 1.0)]
    meta = {"when": "now", "machine": "here", "tensorflow": "2.21.0"}
    json_path, md_path = bench.write(records, tmp_path, meta)
    assert json.loads(json_path.read_text()) == records
    table = md_path.read_text()
    assert "| a | CPU | m | 1.235 | GFLOP/s | numpy | 1 | 1.235 |" in table


def test_tfdata_benchmark_records(tf):
    records = bench.bench_tfdata(latency_scale=0.05, epochs=2, images=256, steps=2)
    names = [r["name"] for r in records]
    assert names == ["tfdata_optimized_vs_naive", "tfdata_vs_compute_bound"]
    speedup = records[0]
    assert speedup["ratio"] == pytest.approx(speedup["value"] / speedup["baseline_value"])
    assert speedup["baseline"].startswith("all optimisations combined")  # which is faster is
    assert speedup["value"] > 0 and speedup["baseline_value"] > 0  # the benchmark's business
    assert records[1]["unit"] == "s" and records[1]["baseline_value"] > 0


def test_dcgan_benchmark_record(tf):
    (rec,) = bench.bench_dcgan(batch_size=16, repeats=2)
    assert rec["name"] == "dcgan_vs_tutorial" and rec["unit"] == "images/s"
    assert rec["ratio"] == pytest.approx(rec["value"] / rec["baseline_value"])
    assert "batch 16" in rec["metric"]


def test_scaling_benchmark_records(tf):
    mirrored, workers = bench.bench_scaling(
        replicas=2, per_replica_batch=16, images=256, epochs=2, worker_steps=6
    )
    gpus = len(tf.config.list_physical_devices("GPU"))  # the sweep uses what TF can use
    expected = {0: "CPU split into 2", 1: "GPU split into 2"}.get(gpus, f"{gpus} GPUs")
    assert mirrored["name"] == "mirrored_scaling" and mirrored["device"].startswith(expected)
    assert f"{max(2, gpus)} replicas" in mirrored["metric"] and mirrored["baseline_value"] > 0
    assert mirrored["ratio"] == pytest.approx(mirrored["value"] / mirrored["baseline_value"])
    assert workers["name"] == "multiworker_vs_one_worker" and workers["value"] > 0
    # local workers get one GPU each where nvidia-smi lists enough, else the CPU
    assert workers["device"] == scale_out_profile.worker_devices(2, len(nvidia_smi()))[1]
    assert workers["ratio"] == pytest.approx(workers["value"] / workers["baseline_value"])


def test_keras_jax_vs_tf_fit_record(tf):
    (rec,) = bench.bench_keras_jax(images=256, global_batch=64, epochs=2, steps_per_execution=2)
    assert rec["name"] == "keras_jax_vs_tf_fit" and rec["unit"] == "images/s"
    assert rec["value"] > 0 and rec["baseline_value"] > 0
    assert rec["ratio"] == pytest.approx(rec["value"] / rec["baseline_value"])
    assert "one device per engine" in rec["device"] and "Keras on TensorFlow" in rec["baseline"]


def test_dcgan_step_records_on_each_engine(tf):
    records = bench.bench_dcgan_engines(batch_size=32, repeats=2)
    names = [r["name"] for r in records]  # torch_xla's in .venv-tpu (make bench-test makes it)
    assert names == ["dcgan_step_keras_jax_vs_tf", "dcgan_step_pytorch_xla_vs_tf"]
    for rec in records:
        assert rec["unit"] == "images/s" and rec["value"] > 0 and rec["baseline_value"] > 0
        assert rec["ratio"] == pytest.approx(rec["value"] / rec["baseline_value"])
        assert "TensorFlow" in rec["baseline"] and "batch 32, float32" in rec["metric"]


def test_dcgan_step_on_cuda_or_why_not():
    """Notebook 10's step on torch's CUDA device (this Python's torch, else .venv-tpu's), with the
    range of images/s over the steps; where torch sees no CUDA device, no value and why."""
    (rec,) = bench.bench_dcgan_cuda(batch_size=16, repeats=5)
    assert rec["name"] == "dcgan_step_pytorch_cuda" and rec["unit"] == "images/s"
    if rec.get("not_run"):  # this CPU: a torch that finds no GPU says which build it is
        assert rec["value"] is None and rec["device"] == "no CUDA device" and "spread" not in rec
        assert re.fullmatch(r"torch \S+ finds no CUDA device \((a CUDA [\d.]+ build: no GPU or "
                            r"driver it can use|likely cause: a CPU-only build)\)", rec["not_run"])
    else:  # a GPU torch sees: its name, and the median between the slowest and fastest step
        low, high = (float(x.replace(",", "")) for x in rec["spread"].split("-"))
        assert rec["device"] != "CPU" and low - 1 <= rec["value"] <= high + 1
        assert "median of 5 steps" in rec["metric"] and "batch 16, float32" in rec["metric"]
