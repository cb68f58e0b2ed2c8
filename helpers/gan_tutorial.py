"""A faithful reimplementation of the TF DCGAN tutorial's training step, as a baseline.

Same models (:mod:`helpers.gan_models` tutorial pair, with Keras's own batch norm and dropout),
float32, ``tf.function`` without XLA, noise drawn at a fixed batch size,
``BinaryCrossentropy(from_logits=True)`` and ``Adam(1e-4)`` for both networks.
Used by: 04_dcgan and ``make bench``.
"""

from __future__ import annotations


def tutorial_step(batch_size: int = 256, noise_dim: int = 100, shape=(28, 28, 1)):
    """Build the tutorial's models, optimizers and compiled step.

    Returns ``(step, generator)``: ``step(images)`` trains once; the generator is there to
    look at what it learned."""
    import keras
    import tensorflow as tf

    from helpers.gan_models import tutorial_discriminator, tutorial_generator
    from helpers.precision import precision

    with precision("float32"):
        # Keras's own batch norm and dropout, as in the tutorial
        generator = tutorial_generator(noise_dim, shape[2], tuned=False)
        discriminator = tutorial_discriminator(shape, tuned=False)
    cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)
    g_opt, d_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4)

    @tf.function
    def step(images):
        noise = tf.random.normal([batch_size, noise_dim])  # the tutorial's fixed batch
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            generated = generator(noise, training=True)
            real_output = discriminator(images, training=True)
            fake_output = discriminator(generated, training=True)
            gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
            disc_loss = cross_entropy(tf.ones_like(real_output), real_output) + cross_entropy(
                tf.zeros_like(fake_output), fake_output
            )
        g_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
        d_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
        g_opt.apply_gradients(zip(g_grads, generator.trainable_variables, strict=True))
        d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables, strict=True))
        return gen_loss, disc_loss

    return step, generator


def compare_steps(
    kind: str,
    device: str,
    batch_size: int = 256,
    repeats: int = 10,
    precision_choice: str = "auto",
    xla_choice: str = "auto",
) -> dict:
    """images/s of the tutorial's step and of ours (precision and XLA chosen for ``kind``),
    same batch of images, same device, one run. Used by: 04, ``make bench``."""
    import tensorflow as tf

    from helpers import gan
    from helpers.devices import device_name
    from helpers.logs import native_noise_filtered
    from helpers.timing import measure

    policy = gan.choose_precision(kind, precision_choice)
    xla = gan.choose_xla(kind, xla_choice)
    strategy = tf.distribute.OneDeviceStrategy(device_name(kind))
    ours = gan.GANTrainer(gan.GANConfig(precision=policy, xla=xla), strategy)
    with tf.device(device_name(kind)), native_noise_filtered():
        images = tf.random.uniform((batch_size, 28, 28, 1), -1.0, 1.0)
        baseline, _ = tutorial_step(batch_size)  # plain TF placement, as in the tutorial
        results = {}
        for name, fn in (
            ("tutorial", lambda: baseline(images)),
            ("ours", lambda: ours.train_step(images)),
        ):
            t = measure(
                fn, name=name, device=device, repeats=repeats, work=batch_size, work_unit="images"
            )
            results[name] = {
                "images_per_s": t.rate,
                "step_ms": t.median_s * 1e3,
                "iqr_ms": t.iqr_s * 1e3,
            }
    results["ours"].update(policy=policy, xla=xla)
    results["ratio"] = results["ours"]["images_per_s"] / results["tutorial"]["images_per_s"]
    return results
