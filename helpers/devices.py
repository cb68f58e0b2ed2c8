"""What this runtime runs on, said honestly; the device to train on; its precision."""

import contextlib
import glob
import importlib.util
import os
import shutil
import subprocess
from collections import namedtuple
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from helpers.errors import AcceleratorUnavailable, LateConfigurationError, too_late
from helpers.params import ACCELERATORS, check, one_of

DEVICE_MIME = "application/vnd.fast-tf-course.device+json"
_MIRRORED: dict = {}  # the MirroredStrategy made so far per set of devices: see mirrored()


@dataclass
class GPU:  # one GPU as TensorFlow sees it
    index: int
    name: str
    compute_capability: str | None = None
    memory_mib: int | None = None

    def describe(self) -> str:
        capability = self.compute_capability and f"compute {self.compute_capability}"
        memory = self.memory_mib and f"{self.memory_mib / 1024:.1f} GiB"
        return ", ".join(filter(None, [self.name, capability, memory]))


@dataclass
class TPUStatus:  # whether this runtime has a TPU, and whether TensorFlow can reach it
    hardware: bool
    usable: bool = False  # tensorflow-tpu is installed: TPUStrategy can drive it (06's cell)
    message: str = "no TPU on this runtime"


def _installed(name: str) -> bool:  # importable here (not imported)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing raises here
        return False


def list_gpus(smi: list[dict] | None = None) -> list[GPU]:
    """The GPUs TensorFlow can use, with their memory from ``nvidia-smi`` (matched by index)."""
    import tensorflow as tf

    smi = nvidia_smi() if smi is None else smi
    gpus = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device) or {}
        capability = details.get("compute_capability")
        gpus.append(GPU(index, details.get("device_name", device.name),
                        ".".join(map(str, capability)) if capability else None,
                        smi[index]["memory_total_mib"] if index < len(smi) else None))
    return gpus


def tpu_hardware_present(environ: Mapping[str, str] | None = None) -> bool:
    """True on what looks like a TPU machine (Colab TPU VM, Kaggle TPU)."""
    env = os.environ if environ is None else environ
    return (any(env.get(key) for key in ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE"))
            or bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*")))


def detect_tpu(environ: Mapping[str, str] | None = None) -> TPUStatus:
    """A TPU, and whether TensorFlow can reach it: read from what is installed, nothing started."""
    if not tpu_hardware_present(environ):
        return TPUStatus(hardware=False)
    if _version("tensorflow-tpu") is None:  # Colab's TPU images: no TensorFlow; Kaggle's: -cpu
        return TPUStatus(True, message="this TPU runtime has no TensorFlow TPU support: pip "
                         "install tensorflow-tpu==<your TF version> --find-links https://storage."
                         "googleapis.com/libtpu-tf-releases/index.html, then restart the session")
    return TPUStatus(True, usable=True, message="a TPU, with tensorflow-tpu to reach it")


def verdict(gpus: list[GPU], tpu: TPUStatus, platform: str = "local", smi=None) -> str:
    """What this runtime can train on (a headline), and on the next line what to do."""
    if tpu.usable:
        return ("TPU: ready for TensorFlow's TPUStrategy.\n"
                "Notebook 06 trains on it with TPUStrategy, 09 and 10 with JAX and PyTorch/XLA; "
                "04, 05 and 07 run on the CPU.")
    if tpu.hardware and _installed("jax") and _installed("libtpu"):  # JAX can drive the TPU
        return ("TPU for JAX and PyTorch/XLA only: TensorFlow cannot use this TPU.\n"
                "Notebook 09 trains on it with Keras 3 on JAX, notebook 10 with PyTorch/XLA (the "
                "engines table says which of them this runtime has). TensorFlow's notebooks run "
                "on its CPU here; for a GPU: Runtime > Change runtime type > T4 GPU. "
                f"({tpu.message})")
    if gpus:
        names = "; ".join(g.describe() for g in gpus)
        count = f"{len(gpus)} GPUs" if len(gpus) > 1 else "GPU"
        return (f"{count}: {names}. TensorFlow will place ops there by default.\n"
                "Next: notebook 02 measures how much faster it is than the CPU.")
    if tpu.hardware:
        return ("CPU only: a TPU is attached, but neither TensorFlow nor JAX can use it.\n"
                f"{tpu.message}. Or install JAX for TPUs (pip install 'jax[tpu]') and run "
                "notebook 09 with Keras on JAX.")
    if smi:
        return (f"CPU only: nvidia-smi sees {smi[0]['name']}, but TensorFlow does not.\n"
                "This TensorFlow build cannot use it (CPU-only build or a CUDA mismatch). On "
                "Colab, keep the preinstalled TensorFlow; on Linux, pip install "
                "'tensorflow[and-cuda]'.")
    advice = {
        "colab": "In Colab: Runtime > Change runtime type > T4 GPU, then run all cells again.",
        "kaggle": "In Kaggle: Settings > Accelerator > GPU T4 x2, then run all cells again.",
    }.get(platform, f"No GPU here. Notebooks {', '.join(r[3] for r in engines_here() if r[3])} "
          "(their engines are installed) run on the CPU, only slower; Colab has a free GPU.")
    return f"CPU only: TensorFlow will run everything on the processor.\n{advice}"


def announce(kind: str, description: str, **details) -> None:
    """Say which device runs the work; in a notebook, also leave the record ``make run`` reads."""
    text = f"Running on: {description}"
    with contextlib.suppress(ImportError):
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            record = {"kind": kind, "description": description, **details}
            display({"text/plain": text, DEVICE_MIME: record}, raw=True)
            return
    print(text)


def available_kinds(gpus: list[GPU], tpu: TPUStatus) -> dict[str, str]:
    """Device kinds here and their names ("cpu"; "gpu", "tpu" where usable: "TPU v2")."""
    kinds = {"cpu": f"CPU ({os.cpu_count()} cores)"}
    if gpus:
        kinds["gpu"] = gpus[0].name
    if tpu.usable:
        generation = os.environ.get("TPU_ACCELERATOR_TYPE", "").split("-")[0]
        kinds["tpu"] = f"TPU {generation}" if generation else "TPU (generation unknown)"
    return kinds


def device_name(kind: str) -> str:  # "tpu", "gpu" or "cpu" to TensorFlow's device string
    return {"tpu": "/TPU:0", "gpu": "/GPU:0"}.get(kind, "/CPU:0")


def _version(*distributions: str) -> str | None:  # "name version" of the first installed
    for name in distributions:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{name} {metadata.version(name)}"
    return None


def engines_here(version: Callable[..., str | None] = _version) -> list[list[str]]:
    """Each engine, its version, what it can drive here, its notebooks; importing no engine."""
    tpu = tpu_hardware_present()
    kind = "TPU" if tpu else ("GPU" if nvidia_smi() else None)
    libtpu = version("libtpu", "libtpu-nightly") is not None
    tf = version("tensorflow-tpu", "tensorflow", "tensorflow-cpu")
    jax, keras = version("jax"), version("keras")
    engines = [  # name, installed, notebooks, on a TPU, on a GPU
        ("TensorFlow", tf, "01-08",
         "yes" if tf and tf.startswith("tensorflow-tpu") else
         "no: no tensorflow-tpu here (no free TPU runtime ships it)",
         "no: a CPU-only build" if tf and tf.startswith("tensorflow-cpu") else
         "yes, where its CUDA build matches the driver (the verdict says)"),
        ("Keras 3 on JAX", jax and keras and f"{jax}, {keras}", "09",
         "yes" if libtpu else "no: libtpu is missing (pip install 'jax[tpu]')",
         "yes" if version("jax-cuda12-plugin", "jax-cuda13-plugin") else
         "no: jax without its CUDA plugin"),
        ("PyTorch/XLA", version("torch_xla", "torch-xla"), "10",
         "yes" if libtpu else "no: libtpu is missing (pip install 'torch_xla[tpu]')",
         "no: PyTorch drives GPUs itself, without XLA")]
    rows = []
    for name, installed, notebooks, on_tpu, on_gpu in engines:
        where = f"{kind}: {on_tpu if tpu else on_gpu}" if kind else "no accelerator here: the CPU"
        rows.append([name, installed, where, notebooks] if installed else
                    [name, "not installed", "", ""])
    return rows


def detect_platform(environ: Mapping[str, str] | None = None) -> str:
    """``"colab"`` (``google.colab`` or ``COLAB_*`` variables), ``"kaggle"`` or ``"local"``."""
    env = os.environ if environ is None else environ
    if any(key.startswith("COLAB_") for key in env) or _installed("google.colab"):
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in env or "KAGGLE_URL_BASE" in env:
        return "kaggle"
    return "local"


def nvidia_smi(run: Callable = subprocess.run, which: Callable = shutil.which) -> list[dict]:
    """GPUs as ``nvidia-smi`` sees them (only it reports the driver); ``[]`` without it."""
    if which("nvidia-smi") is None:
        return []
    try:
        done = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used",
                    "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
        done.check_returncode()
    except (OSError, subprocess.SubprocessError):  # no driver, a failure, a hang
        return []
    gpus = []
    for line in done.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            total, used = (int(float(p)) if p.replace(".", "", 1).isdigit() else None
                           for p in parts[2:])  # None for "[N/A]"
            gpus.append({"name": parts[0], "driver": parts[1], "memory_total_mib": total,
                         "memory_used_mib": used})
    return gpus


#: The device picked: its kind ("gpu" or "cpu") and what it is.
DeviceChoice = namedtuple("DeviceChoice", "kind description")


def mirrored(devices: list[str]):
    """One ``MirroredStrategy`` per set of devices: several over the same ones clash (TF 2.21)."""
    import tensorflow as tf

    if tuple(devices) not in _MIRRORED:
        _MIRRORED[tuple(devices)] = tf.distribute.MirroredStrategy(list(devices))
    return _MIRRORED[tuple(devices)]


def split_devices(count: int, kind: str = "CPU", memory_limit_mb: int | None = None):
    """Split the first ``kind`` into ``count`` logical devices (their names); too late: raises."""
    import tensorflow as tf

    config = tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)
    try:
        tf.config.set_logical_device_configuration(tf.config.list_physical_devices(kind)[0],
                                                   [config] * count)
    except RuntimeError:
        if (have := len(tf.config.list_logical_devices(kind))) != count:
            message = too_late(f"{count} logical {kind} device(s)",
                               f"TensorFlow already started with {have}")
            raise LateConfigurationError(message) from None
    return [d.name for d in tf.config.list_logical_devices(kind)]


def accelerator_rule(tpu: TPUStatus | None = None, gpus: list | None = None):
    """A :mod:`helpers.params` rule: one of ``ACCELERATORS`` that this runtime has."""
    def rule(name: str, value: object) -> object:
        one_of(*ACCELERATORS)(name, value)
        here = ["auto", *available_kinds(list_gpus() if gpus is None else gpus,
                                         detect_tpu() if tpu is None else tpu)]
        return check(lambda v: v in here, f"this runtime has no {str(value).upper()}; allowed "
                     f"here: {', '.join(map(repr, here))}")(name, value)

    return rule


def choose_device(accelerator: str = "auto", gpus: list | None = None) -> DeviceChoice:
    """The device for ``accelerator`` ("auto": the first GPU, else the CPU); no GPU: raises."""
    one_of("auto", "cpu", "gpu")("accelerator", accelerator)  # a TPU: notebook 06's own cell
    if accelerator in ("auto", "gpu"):
        gpus = list_gpus() if gpus is None else gpus
        if len(gpus) > 1:
            return DeviceChoice("gpu", f"GPU {gpus[0].describe()} (the first of {len(gpus)})")
        if gpus:
            return DeviceChoice("gpu", f"GPU {gpus[0].describe()}")
        if accelerator == "gpu":
            raise AcceleratorUnavailable("accelerator='gpu' but TensorFlow sees no GPU on this "
                                         "runtime")
    return DeviceChoice("cpu", f"CPU ({os.cpu_count()} cores)")


def bfloat16_native(kind: str, gpus: list[GPU] | None = None, cpuinfo: str | None = None) -> bool:
    """Whether ``kind`` computes bfloat16 natively: a TPU, GPUs all 8.0+ (not a T4), a bf16 CPU."""
    if kind == "tpu":
        return True
    if kind == "gpu":
        gpus = list_gpus() if gpus is None else gpus
        versions = [tuple(int(part) for part in (g.compute_capability or "0.0").split("."))
                    for g in gpus]
        return bool(versions) and min(versions) >= (8, 0)
    with contextlib.suppress(OSError):
        cpuinfo = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    return bool({"avx512_bf16", "amx_bf16"} & set((cpuinfo or "").split()))


def mixed_policy_for(kind: str, cpu_bf16: bool | None = None) -> str | None:
    """The mixed policy that suits a device, or None (a CPU without native bfloat16)."""
    if kind == "gpu":
        return "mixed_float16"
    native = kind == "tpu" or (bfloat16_native("cpu") if cpu_bf16 is None else cpu_bf16)
    return "mixed_bfloat16" if native else None

