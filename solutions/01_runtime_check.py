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


# Exercise 01.3: run a computation where you ask, or fail
def run_on(device, fn):
    """fn()'s result, computed on `device` ("/GPU:0", "/CPU:0"); an error if it ran elsewhere."""
    with tf.device(device):
        result = fn()
    if not result.device.endswith(device.lstrip("/")):  # TensorFlow fell back without a word
        raise RuntimeError(f"asked for {device}, but it ran on {result.device}")
    return result


print(run_on("/CPU:0", lambda: tf.reduce_sum(tf.ones([1000, 1000]))).device)
