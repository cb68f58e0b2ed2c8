"""Which accelerators this runtime has, and a plain verdict on what to do.

What runtime this is: the platform, and the GPUs ``nvidia-smi`` sees.

Notebook 01 reads the versions and the CUDA build (``tf.sysconfig.get_build_info()``) in its
own cells.

Choose a ``tf.distribute`` strategy: TPU > several GPUs > one GPU > CPU.

The CPU can be split into N logical devices first, so that multi-replica code
(``MirroredStrategy``) runs and is tested without the hardware.

The mixed-precision policy: which Keras dtype policy suits a device, and a block that
uses one and restores the previous policy after it.
"""

from __future__ import annotations

import glob as _glob
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata

from helpers.errors import AcceleratorUnavailable, LateConfigurationError, too_late
from helpers.params import ACCELERATORS, accelerator

#: Mime type of the record :func:`announce` leaves in a notebook's outputs;
#: ``make run`` reads it to say which device ran each notebook.
DEVICE_MIME = "application/vnd.fast-tf-course.device+json"

TPU_INSTALL_HINT = (
    "pip install tensorflow-tpu==<your TF version> "
    "--find-links https://storage.googleapis.com/libtpu-tf-releases/index.html, "
    "then restart the session"
)


@dataclass
class GPU:
    """One GPU as TensorFlow sees it."""

    index: int
    name: str
    compute_capability: str | None = None
    memory_mib: int | None = None

    def describe(self) -> str:
        parts = [self.name]
        if self.compute_capability:
            parts.append(f"compute {self.compute_capability}")
        if self.memory_mib:
            parts.append(f"{self.memory_mib / 1024:.1f} GiB")
        return ", ".join(parts)


@dataclass
class TPUStatus:
    """Whether this runtime has a TPU, and whether TensorFlow can reach it."""

    hardware: bool
    resolver: object | None = None
    message: str = "no TPU on this runtime"

    @property
    def usable(self) -> bool:
        return self.resolver is not None


@dataclass
class Verdict:
    """The one-line answer to "what will TensorFlow run on?", and what to do."""

    kind: str  # "tpu", "gpu" or "cpu"
    headline: str
    advice: str
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.headline}\n{self.advice}"


def list_gpus(smi: list[dict] | None = None) -> list[GPU]:
    """The GPUs TensorFlow can use, with name, compute capability and memory.

    Memory comes from ``nvidia-smi`` (matched by index) when it is there.
    """
    import tensorflow as tf

    smi = nvidia_smi() if smi is None else smi
    gpus = []
    for index, device in enumerate(tf.config.list_physical_devices("GPU")):
        details = tf.config.experimental.get_device_details(device) or {}
        capability = details.get("compute_capability")
        gpus.append(
            GPU(
                index=index,
                name=details.get("device_name", device.name),
                compute_capability=".".join(map(str, capability)) if capability else None,
                memory_mib=smi[index]["memory_total_mib"] if index < len(smi) else None,
            )
        )
    return gpus


def tpu_hardware_present(
    environ: Mapping[str, str] | None = None, glob: Callable = _glob.glob
) -> bool:
    """True where the runtime looks like a TPU machine (Colab TPU VM, Kaggle TPU)."""
    env = os.environ if environ is None else environ
    if any(env.get(key) for key in ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE")):
        return True
    return bool(glob("/dev/accel[0-9]*") or glob("/dev/vfio/[0-9]*"))


def tensorflow_has_tpu_support(has_module: Callable | None = None) -> bool:
    """True if a TPU runtime library for TensorFlow (``tensorflow-tpu``/libtpu) is installed."""
    has_module = has_module or (lambda name: importlib.util.find_spec(name) is not None)
    return bool(has_module("libtpu") or has_module("tensorflow_tpu"))


def detect_tpu(
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
    glob: Callable = _glob.glob,
    resolver_factory: Callable | None = None,
    has_tpu_support: Callable[[], bool] = tensorflow_has_tpu_support,
) -> TPUStatus:
    """Find a TPU without touching the network where there is none.

    On Colab the TPU is attached to the VM: ``TPUClusterResolver(tpu='local')``
    (the bare ``TPUClusterResolver()`` from older posts fails there with "Please
    provide a TPU Name"). On Kaggle the default resolver reads ``TPU_NAME``.
    Since 2025, Colab TPU runtimes may ship no TensorFlow TPU support at all;
    then the message says what to install.
    """
    platform = platform or detect_platform(environ)
    if not tpu_hardware_present(environ, glob):
        return TPUStatus(hardware=False)
    if platform == "colab" and not has_tpu_support():
        return TPUStatus(
            hardware=True,
            message="this Colab TPU runtime has no TensorFlow TPU support: " + TPU_INSTALL_HINT,
        )
    if resolver_factory is None:
        import tensorflow as tf

        resolver_factory = tf.distribute.cluster_resolver.TPUClusterResolver
    kwargs = {"tpu": "local"} if platform == "colab" else {}
    try:
        resolver = resolver_factory(**kwargs)
    except Exception as error:  # the resolver raises ValueError, NotFoundError, ...
        return TPUStatus(
            hardware=True,
            message=f"a TPU seems attached but TensorFlow could not resolve it ({error}); "
            + TPU_INSTALL_HINT,
        )
    call = f"TPUClusterResolver({'tpu=' + repr(kwargs['tpu']) if kwargs else ''})"
    return TPUStatus(hardware=True, resolver=resolver, message=f"TPU found through {call}")


def jax_can_drive_tpu(
    has_module: Callable | None = None, hardware: bool | None = None
) -> bool:
    """True where a TPU is attached and JAX with ``libtpu`` is installed (Colab's TPU runtimes
    since 2025 ship exactly that, and no TensorFlow). JAX itself is not started."""
    has_module = has_module or (lambda name: importlib.util.find_spec(name) is not None)
    hardware = tpu_hardware_present() if hardware is None else hardware
    return bool(hardware and has_module("jax") and has_module("libtpu"))


def verdict(
    gpus: list[GPU],
    tpu: TPUStatus,
    platform: str = "local",
    smi: list[dict] | None = None,
    jax_tpu: bool | None = None,
) -> Verdict:
    """A plain verdict: what this runtime can train on (TensorFlow on a TPU, JAX or
    PyTorch/XLA on a TPU, a GPU, or the CPU), and what to do about it. ``jax_tpu``: whether
    JAX can drive the TPU (default: :func:`jax_can_drive_tpu`).
    """
    smi = smi or []
    if tpu.usable:
        return Verdict(
            "tpu",
            "TPU: ready for TensorFlow's TPUStrategy.",
            "Notebook 05 trains on it with TPUStrategy; notebooks 08 and 09 with JAX and "
            "PyTorch/XLA.",
        )
    jax_tpu = jax_can_drive_tpu(hardware=tpu.hardware) if jax_tpu is None else jax_tpu
    if tpu.hardware and jax_tpu:
        return Verdict(
            "cpu",
            "TPU for JAX and PyTorch/XLA only: TensorFlow cannot use this TPU.",
            "Notebook 08 trains on it with Keras 3 on JAX, notebook 09 with PyTorch/XLA (the "
            "table above says which of them this runtime has). TensorFlow's notebooks run on its "
            "CPU here; for a GPU: Runtime > Change runtime type > T4 GPU. "
            f"({tpu.message})",
        )
    if gpus:
        names = "; ".join(g.describe() for g in gpus)
        count = f"{len(gpus)} GPUs" if len(gpus) > 1 else "GPU"
        return Verdict(
            "gpu",
            f"{count}: {names}. TensorFlow will place ops there by default.",
            "Next: notebook 02 measures how much faster it is than the CPU.",
        )
    if tpu.hardware:
        return Verdict(
            "cpu",
            "CPU only: a TPU is attached, but neither TensorFlow nor JAX can use it.",
            f"{tpu.message}. Or install JAX for TPUs (pip install 'jax[tpu]') and run "
            "notebook 08 with Keras on JAX.",
        )
    if smi:
        return Verdict(
            "cpu",
            f"CPU only: nvidia-smi sees {smi[0]['name']}, but TensorFlow does not.",
            "This TensorFlow build cannot use it (CPU-only build or a CUDA mismatch). On Colab, "
            "keep the preinstalled TensorFlow; on Linux, pip install 'tensorflow[and-cuda]'.",
        )
    advice = {
        "colab": "In Colab: Runtime > Change runtime type > T4 GPU, then run all cells again.",
        "kaggle": "In Kaggle: Settings > Accelerator > GPU T4 x2, then run all cells again.",
    }.get(
        platform,
        "No GPU here. Everything in this course still runs, only slower; "
        "open it in Colab for a free GPU.",
    )
    return Verdict("cpu", "CPU only: TensorFlow will run everything on the processor.", advice)


def announce(kind: str, description: str, **details) -> None:
    """Say on screen which device runs the work, and leave a record ``make run`` reads.
    """
    text = f"Running on: {description}"
    record = {"kind": kind, "description": description, **details}
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
        return
    display({"text/plain": text, DEVICE_MIME: record}, raw=True)


def tpu_name(environ: Mapping[str, str] | None = None) -> str:
    """A TPU's generation from ``TPU_ACCELERATOR_TYPE`` (e.g. "v2-8" -> "TPU v2")."""
    env = os.environ if environ is None else environ
    kind = env.get("TPU_ACCELERATOR_TYPE", "")
    return f"TPU {kind.split('-')[0]}" if kind else "TPU (generation unknown)"


def available_kinds(gpus: list[GPU], tpu: TPUStatus) -> dict[str, str]:
    """Device kinds present, each with a name: always "cpu", plus "gpu"/"tpu" where usable.
    """
    kinds = {"cpu": f"CPU ({os.cpu_count()} cores)"}
    if gpus:
        kinds["gpu"] = gpus[0].name
    if tpu.usable:
        kinds["tpu"] = tpu_name()
    return kinds


def device_name(kind: str) -> str:
    """The TensorFlow device string for a kind ("tpu", "gpu", "cpu")."""
    return {"tpu": "/TPU:0", "gpu": "/GPU:0"}.get(kind, "/CPU:0")


def _version(*distributions: str) -> str | None:
    """The version of the first of ``distributions`` that is installed, or None."""
    for name in distributions:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def engines_here(
    version: Callable[..., str | None] = _version,
    hardware: bool | None = None,
    gpus: int | None = None,
) -> list[list[str]]:
    """Which engines this runtime has, whether each can drive its accelerator, and the
    notebooks that run on it: found from the installed distributions and the machine's device
    files, without importing any engine (a TPU serves one process at a time).

    The arguments are for tests."""
    tpu = tpu_hardware_present() if hardware is None else hardware
    gpus = len(nvidia_smi()) if gpus is None else gpus
    accelerator = "TPU" if tpu else ("GPU" if gpus else None)
    libtpu = version("libtpu", "libtpu-nightly") is not None
    tf = version("tensorflow-tpu", "tensorflow", "tensorflow-cpu")
    engines = [
        ("TensorFlow", tf, {
            "TPU": "yes" if tf and tf.startswith("tensorflow-tpu") else
                   "no: no tensorflow-tpu here (no free TPU runtime ships it)",
            "GPU": "no: a CPU-only build" if tf and tf.startswith("tensorflow-cpu") else
                   "yes, where its CUDA build matches the driver (the verdict below says)"},
         "01-07"),
        ("Keras 3 on JAX", (version("jax") and version("keras")) and
         f"{version('jax')}, {version('keras')}", {
             "TPU": "yes" if libtpu else "no: libtpu is missing (pip install 'jax[tpu]')",
             "GPU": "yes" if version("jax-cuda12-plugin", "jax-cuda13-plugin") else
                    "no: jax without its CUDA plugin"},
         "08"),
        ("PyTorch/XLA", version("torch_xla", "torch-xla"), {
            "TPU": "yes" if libtpu else "no: libtpu is missing (pip install 'torch_xla[tpu]')",
            "GPU": "no: PyTorch drives GPUs itself, without XLA"},
         "09"),
    ]
    rows = []
    for name, installed, drives, notebooks in engines:
        if not installed:
            rows.append([name, "not installed", "", ""])
            continue
        here = drives[accelerator] if accelerator else "no accelerator here: the CPU"
        rows.append([name, installed, f"{accelerator}: {here}" if accelerator else here,
                     notebooks])
    return rows


NVIDIA_SMI_QUERY = "name,driver_version,memory.total,memory.used"


def detect_platform(environ: Mapping[str, str] | None = None, has_module=None) -> str:
    """Return ``"colab"``, ``"kaggle"`` or ``"local"``.

    Colab is recognised by its ``google.colab`` package or ``COLAB_*`` variables,
    Kaggle by its ``KAGGLE_*`` variables.
    """
    env = os.environ if environ is None else environ
    has_module = has_module or (lambda name: importlib.util.find_spec(name) is not None)
    if any(key.startswith("COLAB_") for key in env) or _safe_has(has_module, "google.colab"):
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in env or "KAGGLE_URL_BASE" in env:
        return "kaggle"
    return "local"


def _safe_has(has_module, name: str) -> bool:
    try:
        return bool(has_module(name))
    except (ImportError, ValueError):  # a parent package missing raises here
        return False


def parse_nvidia_smi(text: str) -> list[dict]:
    """Parse ``nvidia-smi --query-gpu=<NVIDIA_SMI_QUERY> --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        name, driver, total, used = parts
        gpus.append(
            {
                "name": name,
                "driver": driver,
                "memory_total_mib": _to_int(total),
                "memory_used_mib": _to_int(used),
            }
        )
    return gpus


def _to_int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def nvidia_smi(run: Callable = subprocess.run, which: Callable = shutil.which) -> list[dict]:
    """GPUs as ``nvidia-smi`` sees them (name, driver, memory); ``[]`` without it.

    The driver version can only be read here; TensorFlow does not report it.
    """
    if which("nvidia-smi") is None:
        return []
    try:
        done = run(
            ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return parse_nvidia_smi(done.stdout)


@dataclass
class StrategyChoice:
    """The strategy picked, and a sentence saying what it runs on."""

    strategy: object
    kind: str  # "tpu", "gpu" or "cpu"
    replicas: int
    description: str


_MIRRORED: dict = {}


def mirrored(devices: list[str], reduce_to_one: bool = False):
    """One ``MirroredStrategy`` per set of devices for the whole process.

    Several MirroredStrategy objects over the same devices number their all-reduces
    alike, and their collectives were seen to clash (TF 2.21: "Shape mismatch in the
    collective instance"); reusing one object avoids that. Strategies over *overlapping*
    sets (CPU:0-1 and CPU:0-3) clash too ("joining a group with size 4, but that group has
    size 2"): ``reduce_to_one=True`` sums on one device instead of with collectives, so
    several of them can live in one process.
    """
    import tensorflow as tf

    key = (tuple(devices), reduce_to_one)
    if key not in _MIRRORED:
        ops = tf.distribute.ReductionToOneDevice() if reduce_to_one else None
        _MIRRORED[key] = tf.distribute.MirroredStrategy(list(devices), cross_device_ops=ops)
    return _MIRRORED[key]


_TPU: dict = {}


def tpu_strategy(resolver):
    """Connect to and initialise the TPU system once per process, and keep one
    ``TPUStrategy`` over it.

    ``initialize_tpu_system`` wipes the TPU's memory: run a second time (a second "Run all"
    in the same kernel) it would invalidate every variable that already lives there. So the
    first call initialises and later calls for the same TPU reuse that strategy.
    """
    import tensorflow as tf

    try:
        key = resolver.master()
    except Exception:  # a resolver that cannot name its TPU: one per object
        key = id(resolver)
    if key not in _TPU:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        _TPU[key] = tf.distribute.TPUStrategy(resolver)
    return _TPU[key]


def split_cpu(count: int) -> int:
    """Split the CPU into ``count`` logical devices; must run before TF's first op.

    Asking again for the count already in force is fine. Asking for another
    count after TensorFlow has started raises :class:`LateConfigurationError`
    with what to do (restart the kernel), instead of TF's cryptic RuntimeError.
    """
    import tensorflow as tf

    if count < 1:
        raise ValueError(f"count={count} is invalid: a CPU splits into 1 or more devices")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == count:
            return count
        raise LateConfigurationError(
            too_late(f"{count} logical CPU device(s)", f"TensorFlow already started with {have}")
        ) from None
    return count


def available_accelerators(tpu: TPUStatus | None = None, gpus: list | None = None) -> list[str]:
    """The values of ``accelerator`` that this runtime can honour."""
    gpus = list_gpus() if gpus is None else gpus
    tpu = detect_tpu() if tpu is None else tpu
    return ["auto", "cpu"] + (["gpu"] if gpus else []) + (["tpu"] if tpu.usable else [])


def accelerator_rule(tpu: TPUStatus | None = None, gpus: list | None = None):
    """A :mod:`helpers.params` rule: the accelerator asked for must be on this runtime.

    Asking for a TPU where there is none fails in the validation cell, with one
    line saying what this runtime has.
    """
    return accelerator(lambda: available_accelerators(tpu, gpus))


def choose_strategy(
    accelerator: str = "auto",
    logical_cpus: int = 0,
    tpu: TPUStatus | None = None,
    gpus: list | None = None,
) -> StrategyChoice:
    """Pick the strategy for ``accelerator`` ("auto", "cpu", "gpu" or "tpu").

    "auto" takes the best device present: TPU, then all GPUs (MirroredStrategy),
    then one GPU, then the CPU (MirroredStrategy over ``logical_cpus`` devices
    when that is 2 or more: they stand in for TPU cores or GPUs). Asking for "gpu"
    or "tpu" where there is none raises :class:`AcceleratorUnavailable`: never
    silently run on something else.
    """
    import tensorflow as tf

    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator={accelerator!r} is invalid: use one of {ACCELERATORS}")
    if accelerator in ("auto", "tpu"):
        tpu = detect_tpu() if tpu is None else tpu
        if tpu.usable:
            strategy = tpu_strategy(tpu.resolver)
            n = strategy.num_replicas_in_sync
            return StrategyChoice(strategy, "tpu", n, f"TPU with {n} cores (TPUStrategy)")
        if accelerator == "tpu":
            raise AcceleratorUnavailable(f"accelerator='tpu' but {tpu.message}")
    if accelerator in ("auto", "gpu"):
        gpus = list_gpus() if gpus is None else gpus
        if len(gpus) > 1:
            strategy = mirrored([d.name for d in tf.config.list_logical_devices("GPU")])
            names = ", ".join(g.name for g in gpus)
            return StrategyChoice(
                strategy, "gpu", len(gpus), f"{len(gpus)} GPUs ({names}), MirroredStrategy"
            )
        if gpus:
            strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
            return StrategyChoice(strategy, "gpu", 1, f"GPU {gpus[0].describe()}")
        if accelerator == "gpu":
            raise AcceleratorUnavailable(
                "accelerator='gpu' but TensorFlow sees no GPU on this runtime"
            )
    if logical_cpus >= 2:  # only where no accelerator was taken
        split_cpu(logical_cpus)
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) > 1:
        strategy = mirrored([d.name for d in cpus])
        return StrategyChoice(
            strategy, "cpu", len(cpus), f"CPU split into {len(cpus)} logical devices"
        )
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    return StrategyChoice(strategy, "cpu", 1, f"CPU ({os.cpu_count()} cores)")


def cpu_supports_bfloat16(cpuinfo: str | None = None) -> bool:
    """True if the CPU has native bfloat16 instructions (AVX512_BF16 or AMX_BF16)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return bool({"avx512_bf16", "amx_bf16"} & flags)


def bfloat16_native(kind: str, gpus: list[GPU] | None = None, cpuinfo: str | None = None) -> bool:
    """Whether ``kind`` computes bfloat16 in hardware: a TPU; GPUs of compute capability 8.0
    (Ampere) or newer, every one of them (a T4, 7.5, has none); a CPU with AVX512_BF16 or AMX.
    Elsewhere bfloat16 is emulated, and runs several times slower than float32."""
    if kind == "tpu":
        return True
    if kind == "gpu":
        gpus = list_gpus() if gpus is None else gpus
        versions = [tuple(int(part) for part in (g.compute_capability or "0.0").split("."))
                    for g in gpus]
        return bool(versions) and min(versions) >= (8, 0)
    return cpu_supports_bfloat16(cpuinfo)


def mixed_policy_for(kind: str, cpu_bf16: bool | None = None) -> str | None:
    """The mixed-precision policy that suits a device, or None where none helps.

    GPU: ``mixed_float16`` (tensor cores; needs loss scaling, which ``fit`` does).
    TPU: ``mixed_bfloat16``. CPU: ``mixed_bfloat16`` only with native bf16 support.
    """
    if kind == "gpu":
        return "mixed_float16"
    if kind == "tpu":
        return "mixed_bfloat16"
    cpu_bf16 = cpu_supports_bfloat16() if cpu_bf16 is None else cpu_bf16
    return "mixed_bfloat16" if cpu_bf16 else None


@contextmanager
def precision(policy: str | None):
    """Use a Keras dtype policy inside the block (``None``: float32), then restore it."""
    import keras

    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(policy or "float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
