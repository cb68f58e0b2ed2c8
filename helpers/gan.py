"""The DCGAN plumbing that is not the lesson, all in one module.

Notebook 04 shows the lesson itself in its own cells (the models' construction, the
``@tf.function`` step with two tapes, loss scaling, checkpoints, the training loop; saved as
:mod:`helpers.lessons.dcgan`). What stays here: the precision/XLA choice per device, the
epoch batches, the run's history (losses, grids, scores), the GIF, the curves, where the
run lives (Drive on Colab), and :class:`GANTrainer`, notebook 05's form of the same step
under any ``tf.distribute`` strategy:

- Noise is drawn at the real batch's size, from a checkpointed ``tf.random.Generator``.
- ``d_steps`` discriminator updates per generator update, inside the compiled step.
- ``mixed_float16`` (GPU) wraps *each* optimizer in a ``LossScaleOptimizer``: ``scale_loss``,
  then ``apply``, which unscales and skips non-finite updates. ``mixed_bfloat16`` (TPU, CPUs
  with native bf16) needs no loss scaling. Logits and losses stay float32.
- Losses are averaged over the *global* batch (``tf.nn.compute_average_loss``), so the same
  global batch gives the same update on 1 or 8 replicas.
- XLA, where chosen, compiles the per-replica step; the distributed step around
  ``strategy.run`` stays a plain ``tf.function`` (see :func:`xla_for_strategy`).
Used by: 04_dcgan, 05_tpu_distribute, ``make bench``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helpers.gan_models import build_pair
from helpers.logs import native_noise_filtered
from helpers.precision import mixed_policy_for, precision

PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
XLA_CHOICES = ("auto", "on", "off")


def choose_precision(kind: str, requested: str = "auto") -> str:
    """The dtype policy: the device's mixed policy where one helps, unless one is forced."""
    if requested != "auto":
        return requested
    return mixed_policy_for(kind) or "float32"


def choose_xla(kind: str, requested: str = "auto") -> bool:
    """XLA on accelerators, off on the CPU (where it was measured slower), unless forced."""
    if requested != "auto":
        return requested == "on"
    return kind in ("gpu", "tpu")


def _is_tpu(strategy) -> bool:
    return type(strategy).__name__.startswith("TPUStrategy")


def xla_for_strategy(strategy, wanted: bool) -> tuple[bool, str]:
    """Whether the step runs under XLA with ``strategy``, and why. XLA is applied to the
    per-replica step (``jit_compile=True`` on the function given to ``strategy.run``):

    - one replica (the default strategy, ``OneDeviceStrategy``): as asked;
    - ``MirroredStrategy`` over GPUs only: as asked. Inside XLA, TF's MirroredStrategy
      updates variables without ``merge_call`` when all its devices are GPUs;
    - ``MirroredStrategy`` with CPU devices: off, because TF cannot run that replica step
      compiled (it fails placing the replicas' variables);
    - TPUs: always on, since TPUStrategy compiles every step with XLA itself.
    Used by: 04, 05 (through :class:`GANTrainer`).
    """
    if _is_tpu(strategy):
        return True, "XLA: the TPU compiles every step with XLA"
    if not wanted:
        return False, "XLA off"
    if strategy.num_replicas_in_sync == 1:
        return True, "XLA on the step"
    devices = getattr(strategy.extended, "worker_devices", ())
    if devices and all("GPU" in d.upper() for d in devices):
        return True, f"XLA on each of the {len(devices)} replicas' step"
    return False, "XLA off: under MirroredStrategy, XLA per replica needs GPUs only"


@dataclass
class GANConfig:
    """What to build and how to train it."""

    architecture: str = "tutorial"
    shape: tuple = (28, 28, 1)
    noise_dim: int = 100
    d_steps: int = 1
    # Adam as in the DCGAN paper (Radford et al.), not the TF tutorial's 1e-4 and beta_1 0.9:
    # on the offline digits, the tutorial's settings left the score near 1 for 400 steps
    learning_rate: float = 2e-4
    beta_1: float = 0.5
    precision: str = "float32"  # a resolved policy (see choose_precision)
    xla: bool = False
    seed: int = 0
    synchronized_bn: bool = False
    dropout: float = 0.3


class GANTrainer:
    """Generator, discriminator, their optimizers and the compiled training step, under any
    ``tf.distribute`` strategy: notebook 04's step (shown there, one device) with what a
    strategy adds (``strategy.run`` and ``reduce``, losses over the global batch, several
    steps per call). Used by: 05_tpu_distribute, :mod:`helpers.distribute`."""

    def __init__(self, config: GANConfig, strategy=None):
        import keras
        import tensorflow as tf

        self.config = config
        self.strategy = strategy or tf.distribute.get_strategy()
        self.policy = config.precision
        with precision(self.policy), self.strategy.scope():
            keras.utils.set_random_seed(config.seed)
            self.generator, self.discriminator = build_pair(
                config.architecture,
                tuple(config.shape),
                config.noise_dim,
                config.synchronized_bn,
                config.dropout,
            )
            self.g_opt = self._optimizer("generator_adam")
            self.d_opt = self._optimizer("discriminator_adam")
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.rng = tf.random.Generator.from_seed(config.seed)
            for opt, model in ((self.g_opt, self.generator), (self.d_opt, self.discriminator)):
                opt.build(model.trainable_variables)
        # XLA compiles the per-replica step; the distributed step around ``strategy.run``
        # stays a plain tf.function. XLA around ``strategy.run`` is the pattern reported
        # broken under MirroredStrategy on several GPUs (keras#18145, tensorflow#53140).
        self.xla, self.xla_note = xla_for_strategy(self.strategy, config.xla)
        compile_replica = self.xla and not _is_tpu(self.strategy)  # a TPU compiles it anyway
        self._replica_fn = (
            tf.function(self._replica_step, jit_compile=True)
            if compile_replica
            else self._replica_step
        )
        self._train = tf.function(self._distributed_step)
        self._traced = False
        self._train_many = None

    def _optimizer(self, name: str):
        import keras

        adam = keras.optimizers.Adam(
            self.config.learning_rate, beta_1=self.config.beta_1, name=name
        )
        if self.policy == "mixed_float16":
            return keras.optimizers.LossScaleOptimizer(adam, name=f"{name}_loss_scale")
        return adam

    @staticmethod
    def _bce(labels, logits):
        import tensorflow as tf

        return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)[:, 0]

    def _replica_step(self, real, noise=None):
        import tensorflow as tf

        batch = tf.shape(real)[0]

        def draw():
            # noise at the real batch's size, from the checkpointed generator
            return self.rng.normal([batch, self.config.noise_dim]) if noise is None else noise

        def losses():
            fake = self.generator(draw(), training=True)
            real_logits = self.discriminator(real, training=True)
            fake_logits = self.discriminator(fake, training=True)
            disc = self._bce(tf.ones_like(real_logits), real_logits) + self._bce(
                tf.zeros_like(fake_logits), fake_logits
            )
            gen = self._bce(tf.ones_like(fake_logits), fake_logits)
            # averaged over the global batch: right on 1 replica and on 8
            return tf.nn.compute_average_loss(disc), tf.nn.compute_average_loss(gen)

        for _ in range(self.config.d_steps - 1):  # extra discriminator-only updates
            with tf.GradientTape() as tape:
                disc, _ = losses()
                scaled = self.d_opt.scale_loss(disc)
            grads = tape.gradient(scaled, self.discriminator.trainable_variables)
            self.d_opt.apply(grads, self.discriminator.trainable_variables)
        # then both networks from one forward pass, as in the TF tutorial
        with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
            disc, gen = losses()
            d_scaled, g_scaled = self.d_opt.scale_loss(disc), self.g_opt.scale_loss(gen)
        g_grads = g_tape.gradient(g_scaled, self.generator.trainable_variables)
        d_grads = d_tape.gradient(d_scaled, self.discriminator.trainable_variables)
        self.g_opt.apply(g_grads, self.generator.trainable_variables)
        self.d_opt.apply(d_grads, self.discriminator.trainable_variables)
        return disc, gen

    def _distributed_step(self, real, noise=None):
        import tensorflow as tf

        args = (real,) if noise is None else (real, noise)
        disc, gen = self.strategy.run(self._replica_fn, args=args)
        self.step.assign_add(1)
        total = tf.distribute.ReduceOp.SUM  # each replica's loss is already / global batch
        return self.strategy.reduce(total, disc, axis=None), self.strategy.reduce(
            total, gen, axis=None
        )

    def _distributed_steps(self, iterator, steps):
        import tensorflow as tf

        disc = gen = tf.constant(0.0)
        for _ in tf.range(steps):  # several steps in one call: fewer round trips to the host
            element = next(iterator)
            parts = element if isinstance(element, tuple) else (element,)
            disc, gen = self._distributed_step(*parts)
        return disc, gen

    def train_steps(self, iterator, steps: int):
        """``steps`` steps in one compiled call, reading a distributed iterator whose
        elements are images or ``(images, noise)``; returns the last step's losses.
        On a TPU this keeps the cores busy between round trips (notebook 05).

        The steps run in a ``tf.range`` loop inside one ``tf.function``."""
        import tensorflow as tf

        if self._train_many is None:
            self._train_many = tf.function(self._distributed_steps)
        with native_noise_filtered():
            return self._train_many(iterator, tf.constant(steps))

    def train_step(self, real, noise=None):
        """One compiled step on a (distributed) batch of images in [-1, 1]; returns losses."""
        args = (real,) if noise is None else (real, noise)
        if self._traced:
            return self._train(*args)
        with native_noise_filtered():  # graph optimisers' notices while tracing
            result = self._train(*args)
        self._traced = True
        return result


def to_gan_range(images, labels=None):
    """uint8 images to float32 in [-1, 1], the generator's ``tanh`` range (for ``map``)."""
    import tensorflow as tf

    return tf.cast(images, tf.float32) / 127.5 - 1.0


def from_gan_range(images):
    """Generator output in [-1, 1] to uint8 pixels."""
    import numpy as np

    return np.uint8(np.clip((np.asarray(images, dtype="float32") + 1) * 127.5, 0, 255))


def epoch_batches(images, batch_size: int, seed: int = 0):
    """``make_dataset(epoch)`` for :func:`run_batches`: the images in [-1, 1],
    in an order fixed by (seed, epoch) alone, in full batches (the remainder is dropped, so
    every step sees ``batch_size`` images and shapes stay static for XLA and TPUs).

    ``epoch`` may be a Python int or a scalar tensor: :func:`run_batches` builds the whole
    run as one stream with ``Dataset.flat_map``. The order is a stateless shuffle of the indices
    (``tf.random.experimental.stateless_shuffle``), so it does not depend on TensorFlow's
    global seed."""
    import tensorflow as tf

    pixels = tf.constant(images)
    count = (len(images) // batch_size) * batch_size

    def make(epoch):
        key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
        order = tf.random.experimental.stateless_shuffle(tf.range(len(images)), seed=key)
        return (
            tf.data.Dataset.from_tensor_slices(order[:count])
            .batch(batch_size, drop_remainder=True)
            .map(lambda index: to_gan_range(tf.gather(pixels, index)))
            .prefetch(tf.data.AUTOTUNE)
        )

    return make


def run_batches(make_dataset, epochs: int, steps_per_epoch: int, step: int = 0):
    """The rest of a run from ``step`` as one stream of batches: epochs ``step //
    steps_per_epoch`` to ``epochs``, each ``make_dataset(epoch)`` (the same order every time it
    is asked for the same epoch), skipping the batches a resumed epoch already trained on.
    One stream, one iterator: an iterator per epoch cost 0.2-4 s each time one was released,
    measured on a CPU, which halved the epochs' images/s. Used by: 04."""
    import tensorflow as tf

    first = step // steps_per_epoch
    return (
        tf.data.Dataset.range(first, max(first, epochs))
        .flat_map(lambda epoch: make_dataset(epoch).take(steps_per_epoch))
        .skip(step - first * steps_per_epoch)
        .prefetch(tf.data.AUTOTUNE)
    )


def architecture_for(shape, requested: str = "auto") -> str:
    """ "tutorial" for 28x28 images and "dcgan" for 32x32 or 64x64, unless one is asked for."""
    if requested != "auto":
        return requested
    return "tutorial" if tuple(shape[:2]) == (28, 28) else "dcgan"


def architecture_rule(shape):
    """A :mod:`helpers.params` rule: the architecture must fit the data set's image size."""
    from helpers.params import ParameterError

    def rule(name: str, value: object) -> object:
        allowed = ("auto", "tutorial", "dcgan")
        if value not in allowed:
            raise ParameterError(
                f"Invalid parameter {name}={value!r}: allowed values are "
                + ", ".join(map(repr, allowed))
                + "."
            )
        fits = {
            "tutorial": tuple(shape[:2]) == (28, 28),
            "dcgan": shape[0] == shape[1] and shape[0] in (32, 64),
        }
        if value != "auto" and not fits[value]:
            raise ParameterError(
                f"Invalid parameter {name}={value!r}: it does not make "
                f"{shape[0]}x{shape[1]} images; use 'auto'."
            )
        return value

    return rule


# -- the run's history, grids, GIF and curves (notebook 04) ----------------------------------


class History:
    """A run's losses (``[step, d_loss, g_loss]`` rows), epoch rows (grid, images/s, score)
    and the epoch grids, kept in ``directory`` beside the checkpoints. Used by: 04.

    :meth:`save` writes ``history.json`` atomically (never half-written); :meth:`load` reads
    it back trimmed to the restored checkpoint's step, so a run killed after its last save
    drops the rows it will train again."""

    def __init__(self, directory, noise_dim: int = 100, scorer=None, grid_seed: int = 1234):
        self.directory = Path(directory)
        (self.directory / "grids").mkdir(parents=True, exist_ok=True)
        self.scorer = scorer
        rng = np.random.default_rng(grid_seed)
        self.fixed_noise = rng.standard_normal((16, noise_dim)).astype("float32")
        self.score_noise = rng.standard_normal((512, noise_dim)).astype("float32")
        self.losses: list = []
        self.epochs: list = []

    @property
    def path(self) -> Path:
        return self.directory / "history.json"

    def as_dict(self) -> dict:
        return {"losses": self.losses, "epochs": self.epochs}

    def save(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.as_dict()))
        os.replace(temporary, self.path)

    def load(self, step: int) -> None:
        """What was saved, up to ``step`` (the restored checkpoint's); nothing if none."""
        saved = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.losses = [row for row in saved.get("losses", []) if row[0] <= step]
        self.epochs = [row for row in saved.get("epochs", []) if row["step"] <= step]

    def add_losses(self, pending) -> None:
        """``(step, d_loss, g_loss)`` tensors to rows: ``float`` waits for the device, once
        for the lot (the last step queued)."""
        self.losses += [[step, float(d), float(g)] for step, d, g in pending]

    def end_epoch(self, generator, epoch: int, step: int, seconds: float, images: int) -> dict:
        """Save the fixed seeds' grid, score the epoch (with a scorer), print one line."""
        grid = self.directory / "grids" / f"epoch_{epoch + 1:04d}.png"
        save_grid(from_gan_range(generator(self.fixed_noise, training=False)), grid)
        row = {"epoch": epoch + 1, "step": step, "seconds": seconds,
               "images_per_s": images / seconds if seconds else None, "grid": grid.name}
        if self.scorer is not None:
            row.update(self.scorer.score(generator(self.score_noise, training=False)))
        self.epochs.append(row)
        last = f", d_loss {self.losses[-1][1]:.3f}, g_loss {self.losses[-1][2]:.3f}"
        score = f", score {row['inception_score']:.2f}" if "inception_score" in row else ""
        print(f"epoch {epoch + 1}: step {step}, {row['images_per_s'] or 0:.0f} images/s"
              + (last if self.losses else "") + score, flush=True)
        return row

    def grids(self) -> list[Path]:
        return [self.directory / "grids" / row["grid"] for row in self.epochs]


def save_grid(images: np.ndarray, path, columns: int = 4) -> Path:
    """Save uint8 images (N, H, W, C) as one grid image (PNG)."""
    from PIL import Image

    n, h, w, c = images.shape
    rows = -(-n // columns)
    canvas = np.zeros((rows * h, columns * w, c), dtype=np.uint8)
    for i, image in enumerate(images):
        r, col = divmod(i, columns)
        canvas[r * h : (r + 1) * h, col * w : (col + 1) * w] = image
    Image.fromarray(canvas[..., 0] if c == 1 else canvas).save(path)
    return Path(path)


def make_gif(grids: list[Path], path, scale: int = 4, ms_per_frame: int = 400) -> Path:
    """An animated GIF of the epoch grids, enlarged ``scale`` times. Used by: 04.

    No grids (no epoch finished yet) raise :class:`helpers.params.ParameterError` saying so,
    and no file is written: a GIF of no frames cannot be made."""
    from PIL import Image

    from helpers.params import ParameterError

    grids = list(grids)
    if not grids:
        raise ParameterError(
            "Invalid parameter grids=[]: no epoch grids to animate; allowed: a list of one or "
            "more grid images (History.grids() lists one per finished epoch)."
        )
    frames = []
    for grid in grids:
        image = Image.open(grid)
        frames.append(image.resize((image.width * scale, image.height * scale), Image.NEAREST))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=ms_per_frame, loop=0)
    return Path(path)


def plot_history(history: dict, real: dict | None = None):
    """Loss curves, and the score per epoch against real images' score where known.
    Used by: 04."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    losses = np.array(history["losses"]) if history["losses"] else np.zeros((0, 3))
    left.plot(losses[:, 0], losses[:, 1], label="discriminator", linewidth=0.8)
    left.plot(losses[:, 0], losses[:, 2], label="generator", linewidth=0.8)
    left.set_xlabel("step")
    left.set_title("losses")
    left.legend()
    scored = [row for row in history["epochs"] if "inception_score" in row]
    if scored:
        right.plot(
            [r["epoch"] for r in scored],
            [r["inception_score"] for r in scored],
            marker="o",
            label="generated",
        )
        if real:
            right.axhline(real["inception_score"], linestyle="--", color="gray", label="real")
        right.set_xlabel("epoch")
        right.set_title("classifier score (higher is better)")
        right.legend()
    fig.tight_layout()
    return fig


USE_DRIVE = ("auto", True, False)


def drive_wanted(use_drive, platform: str | None = None) -> bool:
    """``use_drive`` resolved: "auto" means on Colab (whose /content is lost on a disconnect)."""
    from helpers.environment import detect_platform

    if use_drive == "auto":
        return (platform or detect_platform()) == "colab"
    return bool(use_drive)


def run_directory(run_dir: str, use_drive=False, platform: str | None = None) -> Path:
    """Where a run keeps its files: ``run_dir``, or inside Google Drive on Colab, so that
    checkpoints outlive the runtime (``use_drive`` "auto": on Colab). Mounting Drive asks for
    permission once. Prints which, and whether it survives a disconnect. Used by: 04."""
    from helpers.environment import detect_platform

    platform = platform or detect_platform()
    if not drive_wanted(use_drive, platform):
        where = Path(run_dir)
        lost = " (Colab's /content does not survive a disconnect)" if platform == "colab" else ""
        print(f"run_dir: {where.resolve()}{lost}")
        return where
    if platform != "colab":
        raise RuntimeError("use_drive=True needs Google Colab (Drive is mounted from there)")
    from google.colab import drive  # only on Colab

    drive.mount("/content/drive")
    where = Path("/content/drive/MyDrive") / run_dir
    print(f"run_dir: {where} (in Google Drive: it survives a disconnect)")
    return where
