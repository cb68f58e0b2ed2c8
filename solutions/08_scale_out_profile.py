"""Solutions to notebook 08's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 08.1: resume from the latest checkpoint
def resume(checkpoint, directory):
    """Restore the newest checkpoint in `directory`, if any; the step to start from."""
    latest = tf.train.latest_checkpoint(directory)  # None before the first save
    if latest:
        checkpoint.restore(latest)
    return int(checkpoint.step)


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
