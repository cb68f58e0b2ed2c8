"""Run the course's benchmarks; write build/bench/results.json and results.md.

    python -m tools.bench [--out DIR] [--only NAME ...] [--light]

Each benchmark returns records with ``name``, ``device``, ``metric``,
``value``, ``unit`` and, where it has one, ``baseline``, ``baseline_value``
and ``ratio`` (value / baseline_value). Later notebooks add theirs to
:data:`BENCHMARKS`. Speed goals live here, never in timed tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from helpers import (
    data,
    data_parallel,
    dcgan,
    devices,
    gpu_vs_cpu_benchmark,
    models,
    scale_out_profile,
    tfdata_pipelines,
)
from helpers.logs import import_tensorflow, native_noise_filtered
from helpers.timing import measure
from tools import course
from tools.course import BUILD, NOTEBOOKS, ROOT

CPU_SIZES = (256, 512, 1024, 2048)
ACCELERATOR_SIZES = (256, 512, 1024, 2048, 4096, 8192)


def record(name, device, metric, value, unit, baseline=None, baseline_value=None) -> dict:
    """One benchmark result; ``ratio`` is value / baseline_value where there is a baseline."""
    out = {"name": name, "device": device, "metric": metric, "value": value, "unit": unit}
    if baseline is not None:
        out.update(
            baseline=baseline,
            baseline_value=baseline_value,
            ratio=value / baseline_value if baseline_value else None,
        )
    return out


def bench_matmul(cpu_sizes=CPU_SIZES, accelerator_sizes=ACCELERATOR_SIZES, repeats=10) -> list:
    """``matmul_fp32_vs_numpy`` on the CPU, and the roofline records on every device present."""
    kinds = devices.available_kinds(devices.list_gpus(), devices.detect_tpu())
    sweep = gpu_vs_cpu_benchmark.numpy_sweep(cpu_sizes, repeats, device=kinds["cpu"])
    for kind, name in kinds.items():
        sizes = cpu_sizes if kind == "cpu" else accelerator_sizes
        dtypes = gpu_vs_cpu_benchmark.DTYPES
        sweep += gpu_vs_cpu_benchmark.matmul_sweep(sizes, dtypes, kind, name, repeats)
    cmp = gpu_vs_cpu_benchmark.tf_vs_numpy(sweep, kinds["cpu"])
    n = cmp["size"]
    records = [
        record(
            "matmul_fp32_vs_numpy",
            kinds["cpu"],
            f"TF float32 matmul GFLOP/s at {n}x{n}",
            cmp["tf_gflops"],
            "GFLOP/s",
            "NumPy BLAS float32, same run",
            cmp["numpy_gflops"],
        )
    ]
    for r in sweep:
        if r["device"].endswith("(NumPy BLAS)"):
            continue
        records.append(
            record(
                f"matmul_roofline_{r['dtype']}_{r['size']}",
                r["device"],
                f"median TFLOP/s, {r['dtype']} {r['size']}x{r['size']}",
                r["tflops"],
                "TFLOP/s",
                "published peak" if r["peak_tflops"] else None,
                r["peak_tflops"],
            )
        )
    return records


def bench_tfdata(
    latency_scale: float = 1.0, epochs: int = 5, images: int = 4096, steps: int = 32
) -> list:
    """``tfdata_optimized_vs_naive`` (latency benchmark) and ``tfdata_vs_compute_bound``
    (a real model fed by the tuned TFRecord pipeline against the same steps from memory)."""
    import tensorflow as tf

    from helpers.lessons import tfdata_pipelines as lesson  # notebook 03's pipelines

    kinds = devices.available_kinds(devices.list_gpus(), devices.detect_tpu())
    kind = list(kinds)[-1]
    results = {
        r["variant"]: r
        for r in tfdata_pipelines.compare(
            tfdata_pipelines.Latencies().scaled(latency_scale), lesson.latency_pipeline,
            epochs=epochs,
        )
    }
    naive, best = results["naive"]["epoch_s"], results["all combined"]["epoch_s"]
    records = [
        record(
            "tfdata_optimized_vs_naive",
            "CPU (simulated latencies)",
            "naive pipeline, steady-state epoch s",
            naive,
            "s",
            "all optimisations combined, same run",
            best,
        )
    ]
    source = data.load("mnist", verbose=False)
    x, y, _ = data.repeat_to(source.x_train, source.y_train, images)
    with tempfile.TemporaryDirectory() as folder:
        lesson.write_tfrecords(x, y, folder, shards=4)
        ds = lesson.read_tfrecords(folder, 128, shuffle=len(x))
        with tf.distribute.OneDeviceStrategy(devices.device_name(kind)).scope():
            model = models.mnist_cnn()
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        report = lesson.input_bound(model, ds, steps, epochs)  # notebook 03's cell
    records.append(
        record(
            "tfdata_vs_compute_bound",
            kinds[kind],
            f"pipeline-fed epoch s ({steps} steps, mnist_cnn, batch 128, TFRecords)",
            report["pipeline_epoch_s"],
            "s",
            "compute-only epoch s (data in memory)",
            report["compute_epoch_s"],
        )
    )
    return records


def bench_dcgan(batch_size: int = 256, repeats: int = 10) -> list:
    """``dcgan_vs_tutorial``: images/s of notebook 04's DCGAN step, with every change that
    applies on this device, against the TF tutorial's step (same model, batch 256, same
    device, one run). Both steps and the ablation are notebook 04's own cells
    (:mod:`helpers.lessons.dcgan`)."""
    from helpers.lessons import dcgan as lesson

    kinds = devices.available_kinds(devices.list_gpus(), devices.detect_tpu())
    kind = list(kinds)[-1]
    policy, xla = dcgan.choose_precision(kind), dcgan.choose_xla(kind)
    with native_noise_filtered():
        rows = lesson.ablation(policy, xla, batch_size, repeats)
    tutorial = rows[0][1]
    ours = [rate for _, rate in rows if rate][-1]
    return [
        record(
            "dcgan_vs_tutorial",
            kinds[kind],
            f"DCGAN step images/s, batch {batch_size} ({policy}, {'XLA' if xla else 'no XLA'})",
            ours,
            "images/s",
            "TF tutorial step (float32, no XLA), same run",
            tutorial,
        )
    ]


SCALING_SWEEP = """
import json, sys
from helpers.logs import import_tensorflow
from helpers import data, scale_out_profile
tf = import_tensorflow()
from helpers.lessons.scale_out_profile import strategy_for, sweep  # notebook 07's
replicas, per_replica, images, epochs = map(int, sys.argv[1:5])
devices = scale_out_profile.replica_devices(replicas)
source = data.load("mnist", verbose=False)
x, y, _ = data.repeat_to(source.x_train, source.y_train, images)
counts = [1, len(devices.names)]
rows = sweep(lambda n: strategy_for(devices, n), counts, x, y, per_replica,
                     epochs=epochs)
print(json.dumps({"description": devices.description, "rows": rows}))
"""


def bench_scaling(
    replicas: int = 8,
    per_replica_batch: int = 64,
    images: int = 8192,
    epochs: int = 4,
    worker_steps: int = 200,
) -> list:
    """``mirrored_scaling``: images/s on all replicas (every GPU, or ``replicas`` logical
    devices) against perfect scaling from one replica, so the ratio is the scaling efficiency;
    in a fresh process, since devices must be split before TensorFlow starts.
    ``multiworker_vs_one_worker``: two local workers against one, same global batch."""
    args = [str(v) for v in (replicas, per_replica_batch, images, epochs)]
    done = subprocess.run(
        [sys.executable, "-c", SCALING_SWEEP, *args], capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"the scaling sweep failed:\n{done.stderr[-2000:]}")
    sweep = json.loads(done.stdout.strip().splitlines()[-1])
    one, many = sweep["rows"]
    records = [
        record(
            "mirrored_scaling",
            sweep["description"],
            f"fit images/s on {many['replicas']} replicas, {per_replica_batch} per replica",
            many["images_per_s"],
            "images/s",
            f"1 replica x {many['replicas']} (perfect scaling), same run",
            one["images_per_s"] * many["replicas"],
        )
    ]
    from helpers.lessons import scale_out_profile as lesson  # notebook 07's tf_config

    source = data.load("mnist", verbose=False)
    runs = {}
    with tempfile.TemporaryDirectory() as folder:
        for workers in (1, 2):
            work = Path(folder) / str(workers)
            scale_out_profile.write_data(work, source.x_train, source.y_train)
            script = course.worker_script(NOTEBOOKS / "07_scale_out_profile.ipynb")
            (work / scale_out_profile.WORKER_FILE).write_text(script)  # the notebook's worker.py
            job = scale_out_profile.Job(
                workers=workers, steps=worker_steps, global_batch=128, checkpoint_every=worker_steps
            )
            runs[workers] = scale_out_profile.run_cluster(job, work,
                tf_config=lesson.tf_config)
    records.append(
        record(
            "multiworker_vs_one_worker",
            runs[2].device,
            f"custom-loop images/s, global batch 128, {worker_steps} steps",
            runs[2].images_per_s,
            "images/s",
            "1 worker, same global batch, same run",
            runs[1].images_per_s,
        )
    )
    return records


#: Keras on JAX in a fresh process (the backend is read once, at Keras's first import), on one
#: CPU device: notebook 05's classifier under ``fit``, compiled as notebook 08 compiles it.
JAX_FIT = """
import json, os, sys, time
os.environ.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
import numpy as np, keras
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

#: Notebook 08's DCGAN step (helpers.lessons.tpu_keras_jax, its #@save cells) on one CPU device.
JAX_DCGAN = """
import json, os, sys, time
os.environ.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
import jax, keras, numpy as np
from helpers.lessons.tpu_keras_jax import build_gan
from helpers.timing import steady_state
batch, repeats = map(int, sys.argv[1:3])
step, state = build_gan(jax.devices()[:1], dropout=0.3)  # notebook 04's discriminator dropout
rng = np.random.default_rng(0)
real = rng.uniform(-1, 1, (batch, 28, 28, 1)).astype("float32")
seconds = []
for i in range(repeats + 2):  # two warm-up steps: the first compiles
    noise = rng.standard_normal((batch, 100), dtype="float32")
    began = time.perf_counter()
    state, (disc, gen) = step(state, real, noise)
    float(disc)  # waits for the step
    seconds.append(time.perf_counter() - began)
print(json.dumps({"images_per_s": batch / steady_state(seconds, warmup=2),
                  "engine": f"Keras {keras.__version__} on JAX {jax.__version__}"}))
"""

#: Notebook 09's DCGAN step (helpers.lessons.tpu_pytorch_xla) on one XLA CPU device, in the TPU
#: stack's interpreter (.venv-tpu), float32 as the others.
XLA_DCGAN = """
import json, os, sys, time
os.environ.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
import numpy as np, torch, torch_xla
import torch_xla.core.xla_model as xm
from helpers.lessons.tpu_pytorch_xla import make_discriminator, make_generator, train_step
from helpers.timing import steady_state
batch, repeats = map(int, sys.argv[1:3])
device = torch_xla.device()
torch.manual_seed(0)
generator, discriminator = make_generator().to(device), make_discriminator().to(device)
g_opt, d_opt = (torch.optim.Adam(m.parameters(), 2e-4, betas=(0.5, 0.999))
                for m in (generator, discriminator))
real = (torch.rand(batch, 1, 28, 28) * 2 - 1).to(device)
seconds = []
for i in range(repeats + 3):  # 3 warm-up steps: compiled, then again with Adam's state
    began = time.perf_counter()
    noise = torch.randn(batch, 100, device=device)
    train_step(generator, discriminator, g_opt, d_opt, real, noise, bfloat16=False)
    torch_xla.sync()
    xm.wait_device_ops()
    seconds.append(time.perf_counter() - began)
print(json.dumps({"images_per_s": batch / steady_state(seconds, warmup=3),
                  "engine": f"torch {torch.__version__}, torch_xla {torch_xla.__version__}"}))
"""


def _child(code: str, args, python: str = sys.executable, timeout: int = 1200) -> dict:
    """Run ``code`` in a fresh interpreter; its last line of output, as JSON."""
    done = subprocess.run([python, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"a benchmark child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tpu_python() -> Path | None:
    """The TPU stack's interpreter (`make venv-tpu`), where torch_xla is installed."""
    python = ROOT / ".venv-tpu" / "bin" / "python"
    return python if python.exists() else None


def bench_keras_jax(
    images: int = 8192, global_batch: int = 256, epochs: int = 3, steps_per_execution: int = 8
) -> list:
    """``keras_jax_vs_tf_fit``: images/s of notebook 05's classifier under ``fit``, Keras on
    JAX (a child process) against Keras on TF (this process), on the same device: the CPU, one
    device per engine, float32, same run."""
    import tensorflow as tf

    source = data.load("mnist", verbose=False)
    x, y, _ = data.repeat_to(source.x_train, source.y_train, images)
    tf_run = data_parallel.fit_classifier(
        tf.distribute.OneDeviceStrategy("/cpu:0"), x, y, global_batch, epochs, steps_per_execution
    )
    jax_run = _child(JAX_FIT, (images, global_batch, epochs, steps_per_execution))
    return [
        record(
            "keras_jax_vs_tf_fit",
            f"CPU ({os.cpu_count()} cores), one device per engine",
            f"Keras on JAX fit images/s (notebook 05 classifier, batch {global_batch}, "
            f"float32, steps_per_execution={steps_per_execution})",
            jax_run["images_per_s"],
            "images/s",
            "Keras on TensorFlow, same model, data and settings, same run",
            tf_run["images_per_s"],
        )
    ]


def bench_dcgan_engines(batch_size: int = 256, repeats: int = 10) -> list:
    """``dcgan_step_keras_jax_vs_tf`` and ``dcgan_step_pytorch_xla_vs_tf``: notebook 04's DCGAN
    step (the tutorial's networks, Adam(2e-4, 0.5), batch 256, float32) in images/s on each
    engine, one CPU device each, in one run: TensorFlow's (04's step, no XLA, the baseline),
    Keras on JAX's (08's) and PyTorch/XLA's (09's, in the TPU stack's interpreter)."""
    import tensorflow as tf

    from helpers.lessons import dcgan as lesson

    device = f"CPU ({os.cpu_count()} cores), one device per engine"
    with native_noise_filtered(), tf.device("/CPU:0"):
        step = lesson.our_step(batch_size, "float32", jit_compile=False, fused_bn=True,
                              fast_dropout=True)
        images = tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
        tf_rate = measure(lambda: step(images), repeats=repeats, work=batch_size).rate
    baseline = f"TensorFlow {tf.__version__}: notebook 04's step, same batch, same run"
    metric = "DCGAN step images/s (notebook 04's networks, batch {}, float32) on {}"
    jax_run = _child(JAX_DCGAN, (batch_size, repeats))
    records = [record("dcgan_step_keras_jax_vs_tf", device,
                      metric.format(batch_size, jax_run["engine"]), jax_run["images_per_s"],
                      "images/s", baseline, tf_rate)]
    python = tpu_python()
    if python is None:
        print("dcgan_step_pytorch_xla_vs_tf: skipped, no .venv-tpu (make venv-tpu)")
        return records
    xla_run = _child(XLA_DCGAN, (batch_size, repeats), python=str(python))
    records.append(record("dcgan_step_pytorch_xla_vs_tf", device,
                          metric.format(batch_size, xla_run["engine"]), xla_run["images_per_s"],
                          "images/s", baseline, tf_rate))
    return records


#: name -> function returning records. Later notebooks add their benchmarks here.
BENCHMARKS = {
    "matmul": bench_matmul,
    "tfdata": bench_tfdata,
    "dcgan": bench_dcgan,
    "scaling": bench_scaling,
    "keras_jax": bench_keras_jax,
    "dcgan_engines": bench_dcgan_engines,
}


#: ``--light``: smaller settings per benchmark, for a quick check (``make gpu-check``); the
#: same records, measured on less work. Benchmarks without an entry run as they are.
LIGHT = {
    "matmul": {"cpu_sizes": (256, 512, 1024), "accelerator_sizes": (1024, 4096), "repeats": 5},
    "tfdata": {"latency_scale": 0.3, "epochs": 3, "images": 2048, "steps": 16},
    "dcgan": {"repeats": 5},
    "dcgan_engines": {"repeats": 5},
    "scaling": {"images": 4096, "epochs": 3, "worker_steps": 60},
}


def markdown(records: list[dict], meta: dict) -> str:
    """The records as a markdown table, with when and where they were measured."""
    lines = [
        "# Benchmark results",
        "",
        f"Measured {meta['when']} on {meta['machine']} (TensorFlow {meta['tensorflow']}).",
        "",
        "| name | device | metric | value | unit | baseline | baseline value | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:

        def fmt(v):
            return f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))

        lines.append(
            "| "
            + " | ".join(
                fmt(r.get(k))
                for k in (
                    "name",
                    "device",
                    "metric",
                    "value",
                    "unit",
                    "baseline",
                    "baseline_value",
                    "ratio",
                )
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def write(records: list[dict], out: Path, meta: dict) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "results.json", out / "results.md"
    json_path.write_text(json.dumps(records, indent=1) + "\n")
    md_path.write_text(markdown(records, meta))
    return json_path, md_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUILD / "bench")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS))
    parser.add_argument("--light", action="store_true", help="less work per benchmark")
    args = parser.parse_args(argv)

    tf = import_tensorflow()
    records = []
    for name in args.only or BENCHMARKS:
        print(f"benchmark {name} ...", flush=True)
        records += BENCHMARKS[name](**(LIGHT.get(name, {}) if args.light else {}))
    meta = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()} {platform.node()}",
        "tensorflow": tf.__version__,
    }
    json_path, md_path = write(records, args.out, meta)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
