"""A GAN training run that survives disconnects: checkpoints every N steps and at each
epoch's end (keeping the last few), a history of losses, grids and scores next to
them, and a resume that picks up at the right step. A corrupt latest checkpoint falls
back to the one before, with a warning.
Used by: 04_dcgan.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np

from helpers.gan import from_gan_range

#: the training loop reads losses back every this many steps (and at checkpoints, epoch ends)
READ_BACK_EVERY = 20


class GANRun:
    """Train a :class:`helpers.gan.GANTrainer` epoch by epoch, saving as it goes."""

    def __init__(
        self,
        trainer,
        directory,
        *,
        keep: int = 3,
        every_steps: int = 100,
        scorer=None,
        grid_seed: int = 1234,
    ):
        import tensorflow as tf

        self.trainer = trainer
        self.directory = Path(directory)
        (self.directory / "grids").mkdir(parents=True, exist_ok=True)
        self.every_steps = every_steps
        self.scorer = scorer
        self.checkpoint = tf.train.Checkpoint(**trainer.checkpoint_objects())
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(self.directory / "checkpoints"), max_to_keep=keep
        )
        noise_dim = trainer.config.noise_dim
        rng = np.random.default_rng(grid_seed)
        self.fixed_noise = rng.standard_normal((16, noise_dim)).astype("float32")
        self.score_noise = rng.standard_normal((512, noise_dim)).astype("float32")
        self.history = {"losses": [], "epochs": []}

    @property
    def step(self) -> int:
        """The trainer's step, read back from the device (a sync: not for the training loop,
        which counts steps on the host)."""
        return int(self.trainer.step.numpy())

    # -- saving and resuming ------------------------------------------------------------------

    def save(self, step: int | None = None) -> str:
        """Save a checkpoint numbered ``step`` (default: read the trainer's step) and the
        history beside it."""
        path = self.manager.save(checkpoint_number=self.step if step is None else step)
        target = self.directory / "history.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.history))
        os.replace(temporary, target)  # never a half-written history
        return path

    def restore(self) -> int:
        """Restore the newest checkpoint that loads; return its step (0 for a fresh run)."""
        for path in reversed(self.manager.checkpoints):
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except Exception as error:  # DataLossError, NotFoundError, ValueError, ...
                message = (
                    f"checkpoint {Path(path).name} could not be read "
                    f"({type(error).__name__}); trying the one before"
                )
                warnings.warn(message, stacklevel=2)
                print("WARNING:", message)
                continue
            self._load_history()
            print(f"Resumed from {Path(path).name} at step {self.step}.")
            return self.step
        print("No checkpoint to resume from: starting a new run.")
        return 0

    def _load_history(self) -> None:
        path = self.directory / "history.json"
        if not path.exists():
            return
        saved = json.loads(path.read_text())
        step = self.step
        self.history = {
            "losses": [row for row in saved["losses"] if row[0] <= step],
            "epochs": [row for row in saved["epochs"] if row["step"] <= step],
        }

    # -- training -------------------------------------------------------------------------------

    def train(
        self,
        make_dataset,
        epochs: int,
        steps_per_epoch: int,
        stop_after_step: int | None = None,
        progress: bool = True,
    ) -> dict:
        """Train until ``epochs`` epochs are done, from wherever the run stands.

        ``make_dataset(epoch)`` returns that epoch's batches, the same order every time it is
        asked for the same epoch, so a resumed epoch skips exactly the batches already
        trained. It is called inside ``Dataset.flat_map``, with ``epoch`` a scalar int64
        tensor (as :func:`helpers.gan.epoch_batches` allows): the whole run is then one
        stream, read through one distributed iterator. (An iterator per epoch cost 0.2-4 s
        each time one was released, measured on a CPU, which halved the epochs' images/s.)
        ``stop_after_step`` stops abruptly, without saving (a simulated disconnect).
        Returns the history.
        """
        import tensorflow as tf
        from tqdm.auto import tqdm

        # the step is read back once; then it is counted here, on the host, so that no step
        # waits for the one before: losses are read back in batches (every 20 steps, at a
        # checkpoint and at the end of an epoch), each read waiting for the device once
        step = self.step
        first_epoch = step // steps_per_epoch
        if first_epoch >= epochs:
            return self.history
        stream = (
            tf.data.Dataset.range(first_epoch, epochs)
            .flat_map(lambda epoch: make_dataset(epoch).take(steps_per_epoch))
            .skip(step - first_epoch * steps_per_epoch)
            .prefetch(tf.data.AUTOTUNE)
        )
        batches = iter(self.trainer.strategy.experimental_distribute_dataset(stream))
        for epoch in range(first_epoch, epochs):
            done = step - epoch * steps_per_epoch
            bar = tqdm(
                total=steps_per_epoch,
                initial=done,
                desc=f"epoch {epoch + 1}/{epochs}",
                disable=not progress,
                leave=True,
            )
            start, images, pending = time.perf_counter(), 0, []
            for _ in range(steps_per_epoch - done):
                batch = next(batches)
                losses = self.trainer.train_step(batch)  # queued, not waited for
                step += 1
                pending.append((step, *losses))
                images += self._batch_size(batch)
                bar.update(1)
                if stop_after_step is not None and step >= stop_after_step:
                    bar.close()
                    return self.history
                if step % self.every_steps == 0 or len(pending) >= READ_BACK_EVERY:
                    self._record(pending, bar, images, start)
                    pending = []
                    if step % self.every_steps == 0:
                        self.save(step)
            self._record(pending, bar, images, start)  # waits for the epoch's last step
            seconds = time.perf_counter() - start
            bar.close()
            self._end_epoch(epoch, seconds, images, step)
            self.save(step)
        return self.history

    @staticmethod
    def _batch_size(batch) -> int:
        values = getattr(batch, "values", (batch,))
        return int(sum(v.shape[0] for v in values))

    def _record(self, pending, bar, images: int, start: float) -> None:
        """Read the pending steps' losses back (one wait for the device), then the rate."""
        rows = [[step, float(d), float(g)] for step, d, g in pending]
        self.history["losses"] += rows
        if rows:
            images_per_s = images / (time.perf_counter() - start)
            bar.set_postfix(
                d_loss=f"{rows[-1][1]:.3f}",
                g_loss=f"{rows[-1][2]:.3f}",
                images_per_s=f"{images_per_s:.0f}",
            )

    def _end_epoch(self, epoch: int, seconds: float, images: int, step: int) -> None:
        grid = self.directory / "grids" / f"epoch_{epoch + 1:04d}.png"
        save_grid(from_gan_range(self.trainer.generate(self.fixed_noise)), grid)
        row = {
            "epoch": epoch + 1,
            "step": step,
            "seconds": seconds,
            "images_per_s": images / seconds if seconds else None,
            "grid": grid.name,
        }
        if self.scorer is not None:
            row.update(self.scorer.score(self.trainer.generate(self.score_noise)))
        self.history["epochs"].append(row)

    def grids(self) -> list[Path]:
        return [self.directory / "grids" / row["grid"] for row in self.history["epochs"]]


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
            "more grid images (GANRun.grids() lists one per finished epoch)."
        )
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


def run_directory(run_dir: str, use_drive: bool = False, platform: str | None = None) -> Path:
    """Where a run keeps its files: ``run_dir``, or inside Google Drive on Colab, so that
    checkpoints outlive the runtime. Mounting Drive asks for permission once."""
    from helpers.environment import detect_platform

    if not use_drive:
        return Path(run_dir)
    if (platform or detect_platform()) != "colab":
        raise RuntimeError("use_drive=True needs Google Colab (Drive is mounted from there)")
    from google.colab import drive  # only on Colab

    drive.mount("/content/drive")
    return Path("/content/drive/MyDrive") / run_dir
