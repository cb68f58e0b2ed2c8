import pytest

from helpers import devices


def test_bf16_detection_from_cpu_flags():
    assert devices.cpu_supports_bfloat16("flags : fpu avx512f avx512_bf16 fma")
    assert devices.cpu_supports_bfloat16("flags : amx_bf16 amx_tile")
    assert not devices.cpu_supports_bfloat16("flags : fpu avx2 fma")


def test_mixed_policy_per_device():
    assert devices.mixed_policy_for("gpu") == "mixed_float16"
    assert devices.mixed_policy_for("tpu") == "mixed_bfloat16"
    assert devices.mixed_policy_for("cpu", cpu_bf16=True) == "mixed_bfloat16"
    assert devices.mixed_policy_for("cpu", cpu_bf16=False) is None


def test_precision_is_restored_even_on_error(tf):
    import keras

    with pytest.raises(RuntimeError):
        with devices.precision("mixed_bfloat16"):
            assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
            raise RuntimeError("boom")
    assert keras.mixed_precision.global_policy().name == "float32"
