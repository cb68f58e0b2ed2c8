"""Solutions to notebook 08's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 08.1: the chief's shared folder and each worker's scratch folder
def checkpoint_dir(tf_config, shared, scratch):
    """The folder this task saves its checkpoints into."""
    cluster = tf_config.get("cluster", {})
    task = tf_config.get("task", {"type": "chief", "index": 0})  # no TF_CONFIG: its own chief
    kind, index = task["type"], task["index"]
    if kind == "chief" or (kind == "worker" and index == 0 and "chief" not in cluster):
        return shared
    return f"{scratch}/{kind}_{index}"  # the type too: index 0 may be a chief and a worker


print("Worker 1 of this notebook's cluster saves into",
      checkpoint_dir(tf_config(addresses, 1), "gs://bucket/run", "/tmp/scratch"))


# Exercise 08.2: profile notebook 04's step and name its first fix
from helpers.lessons.nb04 import build_gan, make_train_step  # noqa: E402, TID253  (04's step)


def profile_gan(logdir, steps=5, batch_size=64):
    """Trace `steps` of notebook 04's DCGAN step into `logdir`; its summary and first fix."""
    generator, discriminator, g_opt, d_opt = build_gan("tutorial", (28, 28, 1), "float32")
    step = make_train_step(generator, discriminator, g_opt, d_opt,
                           tf.random.Generator.from_seed(0))
    real = tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)  # one batch, in [-1, 1]
    summary = scale_out_profile.read_trace(capture(lambda: step(real)[0], steps, logdir))
    return summary, advice(summary)[0]


gan_summary, gan_fix = profile_gan(work / "profile" / "dcgan_step")
print(f"notebook 04's step: median {gan_summary.median_step_ms:.1f} ms; first fix: {gan_fix}")
