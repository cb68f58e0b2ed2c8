"""What runtime this is: platform, versions, the CUDA build and the NVIDIA driver.

Used by: 01_runtime_check (and every notebook that states where it ran).
"""

from __future__ import annotations

import importlib.util
import os
import platform as _platform
import shutil
import subprocess
from collections.abc import Callable, Mapping

NVIDIA_SMI_QUERY = "name,driver_version,memory.total,memory.used"


def detect_platform(environ: Mapping[str, str] | None = None, has_module=None) -> str:
    """Return ``"colab"``, ``"kaggle"`` or ``"local"``.

    Colab is recognised by its ``google.colab`` package or ``COLAB_*`` variables,
    Kaggle by its ``KAGGLE_*`` variables. Used by: 01, 05.
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
    Used by: 01, 06.
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


def build_info() -> dict:
    """The CUDA and cuDNN versions this TensorFlow build expects (``None`` if CPU-only).

    Used by: 01.
    """
    import tensorflow as tf

    info = dict(tf.sysconfig.get_build_info())
    return {
        "is_cuda_build": bool(info.get("is_cuda_build", False)),
        "cuda_version": info.get("cuda_version"),
        "cudnn_version": info.get("cudnn_version"),
    }


def versions() -> dict:
    """Python, TensorFlow, Keras and NumPy versions. Used by: 01."""
    import keras
    import numpy
    import tensorflow as tf

    return {
        "Python": _platform.python_version(),
        "TensorFlow": tf.__version__,
        "Keras": keras.__version__,
        "NumPy": numpy.__version__,
    }


def runtime_info(smi: list[dict] | None = None) -> dict:
    """One ordered dict describing this runtime, ready to show as a table.

    Used by: 01.
    """
    smi = nvidia_smi() if smi is None else smi
    build = build_info()
    machine = f"{_platform.machine()}, {os.cpu_count()} CPUs"
    info = {"Platform": detect_platform(), "Machine": machine}
    info.update(versions())
    if build["is_cuda_build"]:
        info["CUDA (TF built for)"] = build["cuda_version"] or "unknown"
        info["cuDNN (TF built for)"] = build["cudnn_version"] or "unknown"
    else:
        info["CUDA (TF built for)"] = "none: this TensorFlow build is CPU-only"
    info["NVIDIA driver"] = smi[0]["driver"] if smi else "none found (no nvidia-smi)"
    return info
