"""The mixed-precision policy: which Keras dtype policy suits a device, and a block that
uses one and restores the previous policy after it.
"""

from __future__ import annotations

from contextlib import contextmanager


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
