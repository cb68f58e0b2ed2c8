"""Solutions to notebook 02's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 02.1: time any call correctly
def median_seconds(fn, repeats):
    """Seconds per call of `fn`: warm up, wait for the device in every sample, the median."""
    fn()  # the first call traces and compiles: not timed
    tf.test.experimental.sync_devices()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        tf.test.experimental.sync_devices()  # stop the clock when the device has finished
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


with tf.device(device):
    seconds = median_seconds(tf.function(lambda: tf.matmul(a, a)), params.repeats)
print(f"{n}x{n} float32 matmul on {device}: {seconds * 1e3:.2f} ms per call, "
      f"{2 * n**3 / seconds / 1e9:,.1f} GFLOP/s (median of {params.repeats})")


# Exercise 02.2: build a model in mixed precision
def mixed_model(kind):
    """The 784-256-10 model in the 16-bit policy for `kind`; the global policy left as it was."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16" if kind == "gpu" else "mixed_bfloat16")
    try:
        return keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                 keras.layers.Dense(10, dtype="float32")])  # float32 logits
    finally:
        keras.mixed_precision.set_global_policy(previous)


mixed = mixed_model(fastest)
print(f"For the {fastest.upper()}: layers compute in {mixed.layers[0].compute_dtype} with "
      f"{mixed.layers[0].variable_dtype} weights; the output is {mixed.layers[-1].compute_dtype}; "
      f"the global policy is still {keras.mixed_precision.global_policy().name}")


# Exercise 02.3: average the loss without stalling
def mean_loss(step, steps):
    """The mean of `steps` losses of `step()`, read from the device after the last step."""
    total = tf.zeros(())
    for _ in range(steps):
        total += step()  # a tensor: the device can run behind
    return float(total) / steps  # the one read, after the last step


with tf.device(loop_device):
    print(f"Mean loss of {steps} more training steps on {loop_device}: "
          f"{mean_loss(lambda: train_step(xb, yb), steps):.4f}")
