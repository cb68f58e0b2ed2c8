"""Which accelerators this runtime has, and a plain verdict on what to do.
"""

from __future__ import annotations

import glob as _glob
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from helpers.environment import detect_platform, nvidia_smi

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
    from importlib import metadata

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
