"""Train the tutorial DCGAN deterministically with notebook 05's own code
(helpers.lessons.nb05, with notebook 04's loop); used by tests/test_gan.py.

    python gan_kill_resume.py RUN_DIR DIE_AT_STEP OUT.npz

Trains 2 epochs of 4 steps on the bundled digits with a checkpoint every 3 steps, resuming
first from whatever RUN_DIR holds. With DIE_AT_STEP > 0 the process kills itself with SIGKILL
just before that step, as notebook 05's child process does (no save, no clean-up). Writes the
generator and discriminator weights to OUT.npz.
"""

import os
import signal
import sys

os.environ["COURSE_OFFLINE"] = "1"

from helpers.logs import import_tensorflow  # noqa: E402

tf = import_tensorflow()
tf.config.experimental.enable_op_determinism()

import numpy as np  # noqa: E402

from helpers import data  # noqa: E402
from helpers.lessons import nb05 as lesson  # noqa: E402

run_dir, die_at, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
images = data.load("digits", limit=256, verbose=False)
settings = dict(architecture="tutorial", policy="float32", xla=False, d_steps=1, directory=run_dir)
run = lesson.start_run(settings, images.shape)
step = int(run.step.numpy())


def dying_step(batch):
    global step
    step += 1
    if step == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return run.train_step(batch)


make_batches = lesson.epoch_batches(images.x_train, 32, seed=3)
batches = iter(lesson.run_batches(make_batches, 2, 4, step))
lesson.train(run, batches, 2, 4, every=3, step_fn=dying_step, save=lesson.save)
weights = run.generator.get_weights() + run.discriminator.get_weights()
np.savez(out, *weights, step=int(run.step.numpy()))
