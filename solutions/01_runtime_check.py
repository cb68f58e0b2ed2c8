"""Solutions to notebook 01's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 01.1: count the GPUs TensorFlow sees
gpu_count = len(tf.config.list_physical_devices("GPU"))
print(f"TensorFlow sees {gpu_count} GPU(s)")


# Exercise 01.2: hide every GPU from a child process
def hidden_gpu_env():
    """The environment for a child that must see no GPU: this one's, with one change."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


# Exercise 01.3: read where an operation ran
def device_type(tensor):
    """"CPU", "GPU" or "TPU": the kind of device that holds `tensor`."""
    return tf.DeviceSpec.from_string(tensor.device).device_type
