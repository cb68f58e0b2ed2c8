from helpers import devices


def test_bf16_detection_from_cpu_flags():
    assert devices.bfloat16_native("cpu", cpuinfo="flags : fpu avx512f avx512_bf16 fma")
    assert devices.bfloat16_native("cpu", cpuinfo="flags : amx_bf16 amx_tile")
    assert not devices.bfloat16_native("cpu", cpuinfo="flags : fpu avx2 fma")


def test_bfloat16_is_native_on_tpus_ampere_gpus_and_cpus_with_the_instructions():
    t4, a100 = devices.GPU(0, "Tesla T4", "7.5"), devices.GPU(1, "A100", "8.0")
    assert devices.bfloat16_native("tpu")
    assert devices.bfloat16_native("gpu", [a100, devices.GPU(2, "H100", "9.0")])
    assert not devices.bfloat16_native("gpu", [t4])  # Colab's and Kaggle's T4: emulated
    assert not devices.bfloat16_native("gpu", [a100, t4])  # the slowest replica sets the pace
    assert not devices.bfloat16_native("gpu", [devices.GPU(0, "unknown")])  # no capability
    assert not devices.bfloat16_native("gpu", [])
    assert devices.bfloat16_native("cpu", cpuinfo="flags : fpu avx512_bf16")
    assert not devices.bfloat16_native("cpu", cpuinfo="flags : fpu avx2 fma")


def test_mixed_policy_per_device():
    assert devices.mixed_policy_for("gpu") == "mixed_float16"
    assert devices.mixed_policy_for("tpu") == "mixed_bfloat16"
    assert devices.mixed_policy_for("cpu", cpu_bf16=True) == "mixed_bfloat16"
    assert devices.mixed_policy_for("cpu", cpu_bf16=False) is None

