"""Run the course's benchmarks; write build/bench/results.json and results.md."""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from helpers import data, data_parallel, dcgan, devices, models, scale_out_profile
from helpers.gpu_vs_cpu_benchmark import DTYPES, matmul_sweep, tf_vs_numpy
from helpers.logs import import_tensorflow, native_noise_filtered
from helpers.tfdata_pipelines import Latencies, compare
from helpers.timing import measure
from tools.course import BUILD, NOTEBOOKS, ROOT, worker_script
from tools.gpu_check import table

TPU_PYTHON = ROOT / ".venv-tpu" / "bin" / "python"  # the TPU stack's (make venv-tpu): torch_xla


def record(name, device, metric, value, unit, baseline=None, baseline_value=None) -> dict:
    """One benchmark result; ``ratio`` is value / baseline_value where there is a baseline."""
    out = {"name": name, "device": device, "metric": metric, "value": value, "unit": unit}
    if baseline is not None:
        ratio = value / baseline_value if baseline_value else None
        out.update(baseline=baseline, baseline_value=baseline_value, ratio=ratio)
    return out


def _devices() -> tuple[dict, str]:
    """``{kind: name}`` of the devices present, and the best kind (a TPU, a GPU, the CPU)."""
    kinds = devices.available_kinds(devices.list_gpus(), devices.detect_tpu())
    return kinds, list(kinds)[-1]


def _mnist(images: int):
    source = data.load("mnist", verbose=False)
    return data.repeat_to(source.x_train, source.y_train, images)[:2]


def _child(code: str, args, python: str = sys.executable, timeout: int | None = 1200) -> dict:
    """Run ``code`` in a fresh interpreter; its last line of output, as JSON."""
    done = subprocess.run([python, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"a benchmark child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_matmul(cpu_sizes=(256, 512, 1024, 2048),
                 accelerator_sizes=(256, 512, 1024, 2048, 4096, 8192), repeats=10) -> list:
    """``matmul_fp32_vs_numpy`` on the CPU, and the throughput sweep on every device present."""
    kinds, _ = _devices()
    sweep = []  # on the CPU, with NumPy's BLAS in the same rounds
    for kind, name in kinds.items():
        sizes = cpu_sizes if kind == "cpu" else accelerator_sizes
        sweep += matmul_sweep(sizes, DTYPES, kind, name, repeats)
    cmp = tf_vs_numpy(sweep, kinds["cpu"])[-1]  # the largest size
    records = [record("matmul_fp32_vs_numpy", kinds["cpu"],
                      f"TF float32 matmul GFLOP/s at {cmp['size']}x{cmp['size']}",
                      cmp["tf_gflops"], "GFLOP/s", "NumPy BLAS float32, same run",
                      cmp["numpy_gflops"])]
    for r in sweep:
        if not r["device"].endswith("(NumPy BLAS)"):
            dtype, n, peak = r["dtype"], r["size"], r["peak_tflops"]
            records.append(record(f"matmul_roofline_{dtype}_{n}", r["device"],
                                  f"median TFLOP/s, {dtype} {n}x{n}", r["tflops"], "TFLOP/s",
                                  "published peak" if peak else None, peak))
    return records


def bench_tfdata(latency_scale: float = 1.0, epochs: int = 5, images: int = 4096,
                 steps: int = 32) -> list:
    """``tfdata_optimized_vs_naive`` (simulated latencies) and ``tfdata_vs_compute_bound``."""
    import tensorflow as tf

    from helpers.lessons import nb03 as lesson  # notebook 03's pipelines

    kinds, kind = _devices()
    latencies = Latencies().scaled(latency_scale)
    results = {r["variant"]: r["epoch_s"] for r in compare(
        latencies, lesson.latency_pipeline, epochs=epochs)}
    records = [record("tfdata_optimized_vs_naive", "CPU (simulated latencies)",
                      "naive pipeline, steady-state epoch s", results["naive"], "s",
                      "all optimisations combined, same run", results["all combined"])]
    x, y = _mnist(images)
    with tempfile.TemporaryDirectory() as folder:
        lesson.write_tfrecords(x, y, folder, shards=4)
        ds = lesson.read_tfrecords(folder, 128, shuffle=len(x))
        with tf.distribute.OneDeviceStrategy(devices.device_name(kind)).scope():
            model = models.mnist_cnn()
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        report = lesson.input_bound(model, ds, steps, epochs)  # notebook 03's cell
    records.append(record("tfdata_vs_compute_bound", kinds[kind],
                          f"pipeline-fed epoch s ({steps} steps, mnist_cnn, batch 128, TFRecords)",
                          report["pipeline_epoch_s"], "s", "compute-only epoch s (data in memory)",
                          report["compute_epoch_s"]))
    return records


def bench_dcgan(batch_size: int = 256, repeats: int = 10) -> list:
    """``dcgan_vs_tutorial``: the last row of notebook 04's ablation against the tutorial's."""
    from helpers.lessons import nb04 as lesson

    kinds, kind = _devices()
    policy, xla = dcgan.choose_precision(kind), dcgan.choose_xla(kind)
    with native_noise_filtered():
        rates = lesson.time_rows(lesson.ablation_rows(policy, xla, batch_size), rounds=repeats)
    tutorial, *_, ours = (statistics.median(r) for r in rates.values())
    metric = (f"DCGAN step images/s, the last row of notebook 04's ablation ({policy}, "
              f"{'XLA' if xla else 'no XLA'}, batch {2 * batch_size}; the tutorial's: batch "
              f"{batch_size})")
    return [record("dcgan_vs_tutorial", kinds[kind], metric, ours, "images/s",
                   "TF tutorial step (float32, no XLA), same run", tutorial)]


#: Notebook 08's replica sweep, in a fresh process: devices are split before TensorFlow starts.
SCALING_SWEEP = """
import json, sys
from helpers.logs import import_tensorflow
from helpers import data, scale_out_profile
tf = import_tensorflow()
from helpers.lessons.nb08 import strategy_for, sweep
replicas, per_replica, images, epochs = map(int, sys.argv[1:5])
devices = scale_out_profile.replica_devices(replicas)
source = data.load("mnist", verbose=False)
x, y, _ = data.repeat_to(source.x_train, source.y_train, images)
counts = [1, len(devices.names)]
rows = sweep(lambda n: strategy_for(devices, n), counts, x, y, per_replica, epochs=epochs)
print(json.dumps({"description": devices.description, "rows": rows}))
"""


def bench_scaling(replicas: int = 8, per_replica_batch: int = 64, images: int = 8192,
                  epochs: int = 4, worker_steps: int = 200) -> list:
    """``mirrored_scaling`` (ratio: scaling efficiency) and ``multiworker_vs_one_worker``."""
    from helpers.lessons import nb08 as lesson  # notebook 08's tf_config

    sweep = _child(SCALING_SWEEP, (replicas, per_replica_batch, images, epochs), timeout=None)
    one, many = sweep["rows"]
    n = many["replicas"]
    records = [record("mirrored_scaling", sweep["description"],
                      f"fit images/s on {n} replicas, {per_replica_batch} per replica",
                      many["images_per_s"], "images/s",
                      f"1 replica x {n} (perfect scaling), same run", one["images_per_s"] * n)]
    source = data.load("mnist", verbose=False)
    script = worker_script(NOTEBOOKS / "08_scale_out_profile.ipynb")
    runs = {}
    with tempfile.TemporaryDirectory() as folder:
        for workers in (1, 2):
            work = Path(folder) / str(workers)
            scale_out_profile.write_data(work, source.x_train, source.y_train)
            (work / scale_out_profile.WORKER_FILE).write_text(script)  # the notebook's worker.py
            job = scale_out_profile.Job(workers=workers, steps=worker_steps, global_batch=128,
                                        checkpoint_every=worker_steps)
            runs[workers] = scale_out_profile.run_cluster(job, work, tf_config=lesson.tf_config)
    records.append(record("multiworker_vs_one_worker", runs[2].device,
                          f"custom-loop images/s, global batch 128, {worker_steps} steps",
                          runs[2].images_per_s, "images/s",
                          "1 worker, same global batch, same run", runs[1].images_per_s))
    return records


#: Notebook 06's classifier under ``fit``, Keras on JAX (a fresh process: Keras reads it once).
JAX_FIT = """
import json, os, sys
os.environ.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
import keras
from helpers import data, models
from helpers.timing import epoch_timer, steady_state
images, global_batch, epochs, spe = map(int, sys.argv[1:5])
source = data.load("mnist", verbose=False)
x, y, _ = data.repeat_to(source.x_train, source.y_train, images)
keras.utils.set_random_seed(0)
model = models.replica_classifier(x.shape[1:], synchronized=False)
model.compile(optimizer=keras.optimizers.Adam(1e-3), steps_per_execution=spe,
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
timer = epoch_timer()
model.fit(x, y, batch_size=global_batch, epochs=epochs, callbacks=[timer], verbose=0)
n = len(x) // global_batch * global_batch
print(json.dumps({"images_per_s": n / steady_state(timer.seconds)}))
"""

#: Notebook 04's DCGAN step on one device, in a fresh process: "jax" (09's, on the CPU), "xla"
#: (10's, XLA's CPU device, in .venv-tpu) or "cuda" (10's, where torch sees one; else why not).
DCGAN_STEP = """
import json, os, statistics, sys, time
os.environ.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
import numpy as np
batch, repeats, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
real, name = np.random.default_rng(0).uniform(-1, 1, (batch, 28, 28, 1)).astype("float32"), "CPU"
if kind == "jax":
    import jax, keras
    from helpers.lessons.nb09 import build_gan
    step, state, _ = build_gan(jax.devices()[:1], batch, "float32", dropout=0.3)  # 04's dropout
    engine, real = f"Keras {keras.__version__} on JAX {jax.__version__}", jax.device_put(real)
else:
    import torch
    from helpers.lessons.nb10 import make_discriminator, make_generator, train_step
    engine = f"torch {torch.__version__}"
    if kind == "cuda" and not torch.cuda.is_available():
        build = (f"a CUDA {torch.version.cuda} build: no GPU or driver it can use"
                 if torch.version.cuda else "likely cause: a CPU-only build")
        print(json.dumps({"not_run": f"{engine} finds no CUDA device ({build})"}))
        sys.exit()
    if kind == "cuda":
        device, name = torch.device("cuda"), torch.cuda.get_device_name()
        wait = torch.cuda.synchronize
    else:
        import torch_xla
        device, engine = torch_xla.device(), f"{engine}, torch_xla {torch_xla.__version__}"
        wait = lambda: torch_xla.sync(wait=True)  # runs the step's graph, and waits for it
    torch.manual_seed(0)
    generator, discriminator = make_generator().to(device), make_discriminator().to(device)
    g_opt, d_opt = (torch.optim.Adam(m.parameters(), 2e-4, betas=(0.5, 0.999))
                    for m in (generator, discriminator))
    real = torch.from_numpy(real).reshape(batch, 1, 28, 28).to(device)  # one channel, first
seconds = []
for i in range(repeats + 3):  # 3 warm-up steps: compiled, then again with the optimizers' state
    began = time.perf_counter()
    if kind == "jax":
        state, (disc, gen) = step(state, real, i)  # the noise is drawn in the step
        float(disc)  # waits for the step
    else:
        noise = torch.randn(batch, 100, device=device)
        train_step(generator, discriminator, g_opt, d_opt, real, noise, bfloat16=False)
        wait()
    seconds.append(time.perf_counter() - began)
rates = sorted(batch / s for s in seconds[3:])  # images/s of each step after the warm-up
metric = (f"DCGAN step images/s, median of {repeats} steps (notebook 04's networks, batch {batch}, "
          f"float32) on {engine}")
print(json.dumps({"images_per_s": statistics.median(rates), "metric": metric, "device": name,
                  "spread": f"{rates[0]:,.0f}-{rates[-1]:,.0f}"}))
"""


def bench_keras_jax(images: int = 8192, global_batch: int = 256, epochs: int = 3,
                    steps_per_execution: int = 8) -> list:
    """``keras_jax_vs_tf_fit``: notebook 06's classifier, Keras on JAX against on TF."""
    import tensorflow as tf

    x, y = _mnist(images)
    tf_run = data_parallel.fit_classifier(tf.distribute.OneDeviceStrategy("/cpu:0"), x, y,
                                          global_batch, epochs, steps_per_execution)
    jax_run = _child(JAX_FIT, (images, global_batch, epochs, steps_per_execution))
    metric = (f"Keras on JAX fit images/s (notebook 06 classifier, batch {global_batch}, "
              f"float32, steps_per_execution={steps_per_execution})")
    return [record("keras_jax_vs_tf_fit", f"CPU ({os.cpu_count()} cores), one device per engine",
                   metric, jax_run["images_per_s"], "images/s",
                   "Keras on TensorFlow, same model, data and settings, same run",
                   tf_run["images_per_s"])]


def bench_dcgan_engines(batch_size: int = 256, repeats: int = 10) -> list:
    """``dcgan_step_keras_jax_vs_tf`` and ``dcgan_step_pytorch_xla_vs_tf``, against 04's."""
    import tensorflow as tf

    from helpers.lessons import nb04 as lesson

    with native_noise_filtered(), tf.device("/CPU:0"):
        step = lesson.our_step("float32", False)
        images = tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
        tf_rate = measure(lambda: step(images), repeats=repeats, work=batch_size).rate
    baseline = f"TensorFlow {tf.__version__}: notebook 04's step, same batch, same run"
    records = []
    for name, kind, python in [("keras_jax", "jax", sys.executable),
                               ("pytorch_xla", "xla", TPU_PYTHON)]:
        run = _child(DCGAN_STEP, (batch_size, repeats, kind), python=str(python))
        records.append(record(f"dcgan_step_{name}_vs_tf",
                              f"CPU ({os.cpu_count()} cores), one device per engine", run["metric"],
                              run["images_per_s"], "images/s", baseline, tf_rate))
    return records


def bench_dcgan_cuda(batch_size: int = 256, repeats: int = 20) -> list:
    """``dcgan_step_pytorch_cuda``: notebook 10's step on CUDA, or why not (and no value)."""
    python = sys.executable if importlib.util.find_spec("torch") else TPU_PYTHON  # make venv-tpu
    run = _child(DCGAN_STEP, (batch_size, repeats, "cuda"), python=str(python))
    found = record("dcgan_step_pytorch_cuda", run.get("device", "no CUDA device"),
                   run.get("metric", "DCGAN step images/s"), run.get("images_per_s"), "images/s")
    return [found | {key: run[key] for key in ("spread", "not_run") if key in run}]


BENCHMARKS = {"matmul": bench_matmul, "tfdata": bench_tfdata, "dcgan": bench_dcgan,
              "scaling": bench_scaling, "keras_jax": bench_keras_jax,
              "dcgan_engines": bench_dcgan_engines, "dcgan_cuda": bench_dcgan_cuda}
LIGHT = {  # --light (make gpu-check): the same records, measured on less work
    "matmul": {"cpu_sizes": (256, 512, 1024), "accelerator_sizes": (1024, 4096), "repeats": 5},
    "tfdata": {"latency_scale": 0.3, "epochs": 3, "images": 2048, "steps": 16},
    "dcgan": {"repeats": 5}, "dcgan_engines": {"repeats": 5}, "dcgan_cuda": {"repeats": 10},
    "scaling": {"images": 4096, "epochs": 3, "worker_steps": 60},
}
COLUMNS = ["name", "device", "metric", "value", "unit", "baseline", "baseline_value", "ratio"]


def write(records: list[dict], out: Path, meta: dict) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "results.json", out / "results.md"
    json_path.write_text(json.dumps(records, indent=1) + "\n")
    rows = table([c.replace("_", " ") for c in COLUMNS], [[r.get(c) for c in COLUMNS]
                                                          for r in records])
    md_path.write_text(f"# Benchmark results\n\nMeasured {meta['when']} on {meta['machine']} "
                       f"(TensorFlow {meta['tensorflow']}).\n\n" + "\n".join(rows) + "\n")
    return json_path, md_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUILD / "bench")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS))
    parser.add_argument("--light", action="store_true", help="less work per benchmark")
    args = parser.parse_args(argv)
    version = import_tensorflow().__version__ if importlib.util.find_spec("tensorflow") else "none"
    records = []
    for name in args.only or BENCHMARKS:
        print(f"benchmark {name} ...", flush=True)
        records += BENCHMARKS[name](**(LIGHT.get(name, {}) if args.light else {}))
    meta = {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()} {platform.node()}", "tensorflow": version}
    json_path, md_path = write(records, args.out, meta)
    print(f"{md_path.read_text()}\nwrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
