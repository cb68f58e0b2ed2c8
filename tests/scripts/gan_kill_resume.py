"""Train the tutorial DCGAN deterministically; used by tests/test_gan.py.

    python gan_kill_resume.py RUN_DIR STOP_AFTER_STEP OUT.npz

Trains 2 epochs of 4 steps on the bundled digits with a checkpoint every 3 steps,
stopping abruptly (no save) after STOP_AFTER_STEP (0: never), resuming first from
whatever RUN_DIR holds. Writes the generator and discriminator weights to OUT.npz.
"""

import os
import sys

os.environ["COURSE_OFFLINE"] = "1"

from helpers.logs import import_tensorflow  # noqa: E402

tf = import_tensorflow()
tf.config.experimental.enable_op_determinism()

import keras  # noqa: E402
import numpy as np  # noqa: E402

from helpers import data, gan, gan_run  # noqa: E402

run_dir, stop_after, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
keras.utils.set_random_seed(0)
images = data.load("digits", limit=256, verbose=False)
trainer = gan.GANTrainer(gan.GANConfig(precision="float32", seed=7))
run = gan_run.GANRun(trainer, run_dir, every_steps=3)
run.restore()
run.train(
    gan.epoch_batches(images.x_train, 32, seed=3),
    epochs=2,
    steps_per_epoch=4,
    stop_after_step=stop_after or None,
    progress=False,
)
weights = trainer.generator.get_weights() + trainer.discriminator.get_weights()
np.savez(out, *weights, step=run.step)
