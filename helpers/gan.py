"""The DCGAN plumbing that is not the lesson, all in one module.

Notebook 04 shows the lesson itself in its own cells (the models' construction, the
``@tf.function`` step with two tapes, loss scaling, checkpoints, the training loop; saved as
:mod:`helpers.lessons.dcgan`). What stays here: the precision/XLA choice per device, the
epoch batches, the run's history (losses, grids, scores), the GIF, the curves, where the
run lives (Drive on Colab). Notebook 05 runs notebook 04's step itself under a
``tf.distribute`` strategy: there is one GAN step in the course.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from helpers.errors import invalid
from helpers.precision import mixed_policy_for

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
    measured on a CPU, which halved the epochs' images/s."""
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
    def rule(name: str, value: object) -> object:
        allowed = ("auto", "tutorial", "dcgan")
        if value not in allowed:
            raise invalid(name, value, "allowed values are " + ", ".join(map(repr, allowed)))
        fits = {
            "tutorial": tuple(shape[:2]) == (28, 28),
            "dcgan": shape[0] == shape[1] and shape[0] in (32, 64),
        }
        if value != "auto" and not fits[value]:
            raise invalid(name, value, f"it does not make {shape[0]}x{shape[1]} images; use 'auto'")
        return value

    return rule


# -- the run's history, grids, GIF and curves (notebook 04) ----------------------------------


class History:
    """A run's losses (``[step, d_loss, g_loss]`` rows), epoch rows (grid, images/s, score)
    and the epoch grids, kept in ``directory`` beside the checkpoints.

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
    """An animated GIF of the epoch grids, enlarged ``scale`` times.

    No grids (no epoch finished yet) raise :class:`helpers.errors.ParameterError` saying so,
    and no file is written: a GIF of no frames cannot be made."""
    from PIL import Image

    grids = list(grids)
    if not grids:
        raise invalid("grids", [], "no epoch grids to animate; allowed: a list of one or more "
                      "grid images (History.grids() lists one per finished epoch)")
    frames = []
    for grid in grids:
        image = Image.open(grid)
        frames.append(image.resize((image.width * scale, image.height * scale), Image.NEAREST))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=ms_per_frame, loop=0)
    return Path(path)


def plot_history(history: dict, real: dict | None = None):
    """Loss curves, and the score per epoch against real images' score where known."""
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
    permission once. Prints which, and whether it survives a disconnect."""
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
