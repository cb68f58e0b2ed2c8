"""Which engine trains where: TensorFlow, Keras on JAX, or both, on this runtime.

Since 2025 Colab's TPU runtimes ship JAX and no TensorFlow, and its free TPU is a v5e-1
(one chip); Kaggle's v5e-8 still runs TensorFlow. So notebook 05 looks first, without
importing either engine (a TPU serves one process, and JAX fixes its devices when it
starts), then picks:

- TensorFlow reaches a TPU: ``TPUStrategy`` on it; Keras on JAX on simulated CPU devices in
  its own process (the TPU is taken).
- A TPU that only JAX can drive (``libtpu`` installed, TensorFlow missing or without TPU
  support): Keras on JAX on the TPU; TensorFlow, if installed, on simulated CPU devices.
- A GPU TensorFlow sees: TensorFlow on it; Keras on JAX on simulated CPU devices (JAX
  would otherwise compete with TensorFlow for the GPU's memory).
- Nothing: both engines on simulated CPU devices (TF: logical devices; JAX:
  ``--xla_force_host_platform_device_count``).
Used by: 01_runtime_check (the verdict), 05_tpu_distribute.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from helpers.devices import TPUStatus, tpu_hardware_present

ENGINES = ("tf", "jax")
ENGINE_NAMES = {"tf": "TensorFlow", "jax": "Keras on JAX"}


def installed(name: str) -> bool:
    """True if ``name`` can be imported here (it is not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken or hidden install counts as none
        return False


@dataclass
class Runtime:
    """What this runtime offers each engine, found without starting either."""

    tensorflow: bool  # TensorFlow is installed
    jax: bool  # JAX is installed
    tpu_hardware: bool  # a TPU is attached (device files or TPU_* variables)
    tf_tpu: bool  # TensorFlow's resolver reached it
    jax_tpu: bool  # libtpu is installed, so JAX can drive it
    gpus: int  # GPUs TensorFlow sees
    tpu_message: str = ""


def inspect_runtime(
    has_module: Callable[[str], bool] = installed,
    tpu_hardware: Callable[[], bool] = tpu_hardware_present,
    detect_tpu: Callable[[], TPUStatus] | None = None,
    count_gpus: Callable[[], int] | None = None,
) -> Runtime:
    """Look at this runtime; TensorFlow is imported only if it is installed, JAX never.

    The arguments are for tests (fakes for each kind of runtime). Used by: 05."""
    from helpers import devices

    tensorflow, jax = has_module("tensorflow"), has_module("jax")
    hardware = tpu_hardware()
    status = TPUStatus(hardware=hardware)
    if tensorflow and (detect_tpu is None or count_gpus is None):
        from helpers.logs import import_tensorflow

        import_tensorflow()  # quietly, before anything below imports it
    if tensorflow and hardware:
        status = (detect_tpu or devices.detect_tpu)()
    elif hardware:
        status.message = "TensorFlow is not installed on this runtime"
    gpus = 0
    if tensorflow:
        gpus = count_gpus() if count_gpus else len(devices.list_gpus())
    return Runtime(
        tensorflow=tensorflow,
        jax=jax,
        tpu_hardware=hardware,
        tf_tpu=status.usable,
        jax_tpu=devices.jax_can_drive_tpu(has_module, hardware),
        gpus=gpus,
        tpu_message=status.message,
    )


@dataclass
class Plan:
    """Where each engine runs: "tpu", "gpu", "cpu" (simulated devices) or None (not at all)."""

    tf: str | None
    jax: str | None
    tf_devices: int  # TensorFlow's simulated CPU devices (0 on real hardware)
    jax_devices: int  # JAX's simulated CPU devices (0 on real hardware)
    reason: str

    def describe(self) -> list[str]:
        """One line per engine: where it runs."""
        lines = []
        for engine in ENGINES:
            where, count = getattr(self, engine), getattr(self, f"{engine}_devices")
            if where is None:
                text = "not run here"
            elif where == "cpu":
                text = f"{count} simulated CPU device(s)"
            else:
                text = f"the {where.upper()}"
            lines.append(f"{ENGINE_NAMES[engine]}: {text}")
        return lines


def available_accelerators(runtime: Runtime) -> list[str]:
    """The values of notebook 05's ``accelerator`` this runtime can honour. Used by: 05."""
    return (
        ["auto", "cpu"]
        + (["gpu"] if runtime.gpus else [])
        + (["tpu"] if runtime.tf_tpu or runtime.jax_tpu else [])
    )


def accelerator_rule(runtime: Runtime):
    """A :mod:`helpers.params` rule for ``accelerator`` that needs neither engine imported.
    Used by: 05 (validation cell)."""
    from helpers.params import accelerator

    return accelerator(lambda: available_accelerators(runtime))


def simulated_devices_rule(runtime: Runtime | None = None, most: int = 64):
    """A :mod:`helpers.params` rule: a dict naming each engine to run ("tf", "jax") and its
    simulated device count (1-``most``). An engine this runtime lacks is skipped, not refused,
    so the default works on Colab's TPU runtime (no TensorFlow): :func:`choose` says so.
    Used by: 05 (validation cell)."""
    from helpers.params import ParameterError

    def rule(name: str, value: object) -> object:
        def bad(why: str):
            return ParameterError(f"Invalid parameter {name}={value!r}: {why}.")

        if not isinstance(value, dict) or not value:
            raise bad('expected a dict of engine to device count, e.g. {"tf": 8, "jax": 8}')
        for engine, count in value.items():
            if engine not in ENGINES:
                raise bad(f"engines are {', '.join(map(repr, ENGINES))}, not {engine!r}")
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= most:
                raise bad(f"{engine!r} needs a device count from 1 to {most}, not {count!r}")
        return value

    return rule


def choose(runtime: Runtime, accelerator: str = "auto", simulated: dict | None = None) -> Plan:
    """Pick where each engine runs (see the module's docstring); ``simulated`` names the
    engines to run and their simulated device counts (an engine left out is not run).
    Used by: 05."""
    simulated = {"tf": 8, "jax": 8} if simulated is None else simulated
    tf_wanted = runtime.tensorflow and "tf" in simulated
    jax_wanted = runtime.jax and "jax" in simulated
    tf = jax = None
    if accelerator in ("auto", "tpu") and runtime.tf_tpu and tf_wanted:
        tf = "tpu"
        reason = "TensorFlow reaches the TPU, so TPUStrategy trains on it"
        if jax_wanted:
            reason += "; the TPU serves one process, so Keras on JAX runs on simulated devices"
    elif accelerator in ("auto", "tpu") and runtime.jax_tpu and jax_wanted:
        jax = "tpu"
        why = ("TensorFlow is not installed" if not runtime.tensorflow
               else "TensorFlow cannot reach the TPU")
        reason = f"a TPU that only JAX can drive ({why}): Keras on JAX trains on it"
        if tf_wanted:
            reason += "; TensorFlow runs on simulated devices"
    elif accelerator in ("auto", "gpu") and runtime.gpus and tf_wanted:
        tf = "gpu"
        reason = "TensorFlow sees a GPU and trains on it"
        if jax_wanted:
            reason += "; Keras on JAX runs on simulated CPU devices, leaving the GPU to TF"
    else:
        reason = ("no accelerator here" if accelerator == "auto"
                  else f"accelerator={accelerator!r}")
        reason += ": every engine runs on simulated CPU devices, the CPU split into several"
    if tf is None and tf_wanted:
        tf = "cpu"
    if jax is None and jax_wanted:
        jax = "cpu"
    missing = [ENGINE_NAMES[e] for e in ENGINES
               if e in simulated and not (runtime.tensorflow if e == "tf" else runtime.jax)]
    if missing:
        reason += f" ({' and '.join(missing)} not installed: skipped)"
    return Plan(
        tf=tf,
        jax=jax,
        tf_devices=simulated.get("tf", 0) if tf == "cpu" else 0,
        jax_devices=simulated.get("jax", 0) if jax == "cpu" else 0,
        reason=reason + ".",
    )
