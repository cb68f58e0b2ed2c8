"""What runtime this is: the platform, and the GPUs ``nvidia-smi`` sees.

Notebook 01 reads the versions and the CUDA build (``tf.sysconfig.get_build_info()``) in its
own cells.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping

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
