"""Plumbing of notebook 04 (DCGAN), reused by 05 and 08: the run's history, the scorer and the
faster batch-norm/dropout layers.

The DCGAN plumbing that is not the lesson, all in one module.

Notebook 04 shows the lesson itself in its own cells (the networks, saved apart as
:mod:`helpers.lessons.dcgan_networks` because 08 builds them without TensorFlow; the models'
construction, the ``@tf.function`` step with two tapes, loss scaling, the epoch batches and
the run's stream of them, checkpoints, the training loop; saved as
:mod:`helpers.lessons.dcgan`). What stays here:
the precision/XLA choice per device, the run's history (losses, grids, scores), the GIF, the
curves, where the run lives (Drive on Colab), how much of the run this session's time
budget fits (:func:`plan_session`). Notebook 05 runs notebook 04's step itself under a
``tf.distribute`` strategy: there is one GAN step in the course.

In 04's networks, batch norm runs TensorFlow's fused kernel and dropout draws half the random
bits (the layers below), except in the tutorial baseline.

Score generated images offline: a small classifier trained once on the real data
(cached on disk) gives an Inception-Score-like figure and a Fréchet distance on its
features, without downloading Inception.

Higher score and lower distance are better; real images set the reference.

Keras layers that do the same maths as Keras's own, faster on TensorFlow.

Keras 3's ``BatchNormalization`` is written with backend-neutral ops: on TensorFlow it
casts to float32, computes the moments, normalises and casts back, a dozen small ops and
their gradients. TensorFlow has one fused kernel for all of it (``FusedBatchNormV3``, which
oneDNN and cuDNN accelerate, and which takes bfloat16/float16 inputs with float32
statistics). :class:`FusedBatchNormalization` uses it and is otherwise Keras's layer: same
variables in the same order (so checkpoints are interchangeable), same momentum, epsilon and
moving statistics.

Keras's ``Dropout`` draws one 32-bit random word per element; on a CPU, dropout (drawing
and applying the masks) took about a tenth of the DCGAN step. :class:`HalfWordDropout` draws
one word per two elements.

Each made the DCGAN step about 5% faster on a 2-core CPU in bfloat16 (``make bench``
records the step as a whole, ``dcgan_vs_tutorial``).

Both choose by feature, not by version: where this runtime lacks what the faster path needs
(Keras on another backend than TensorFlow, a Keras without ``renorm`` or a ``SeedGenerator``
on its layers, ...), they compute as Keras's own layer does. :func:`describe` says which
path ran.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from PIL import Image

from helpers import data, workdirs
from helpers.devices import detect_platform, mixed_policy_for
from helpers.errors import invalid
from helpers.models import scoring_classifier
from helpers.params import all_of, boolean, check, folder, integer, number, one_of, validate

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
    return np.uint8(np.clip((np.asarray(images, dtype="float32") + 1) * 127.5, 0, 255))


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

    def end_epoch(self, generator, epoch: int, step: int, seconds: float, images: int,
                  epochs: int | None = None) -> dict:
        """Save the fixed seeds' grid, score the epoch (with a scorer), print one line: with
        ``epochs`` (the run's), also how long the epochs left take at this one's pace."""
        grid = self.directory / "grids" / f"epoch_{epoch + 1:04d}.png"
        save_grid(from_gan_range(generator(self.fixed_noise, training=False)), grid)
        row = {"epoch": epoch + 1, "step": step, "seconds": seconds,
               "images_per_s": images / seconds if seconds else None, "grid": grid.name}
        if self.scorer is not None:
            row.update(self.scorer.score(generator(self.score_noise, training=False)))
        self.epochs.append(row)
        last = f", d_loss {self.losses[-1][1]:.3f}, g_loss {self.losses[-1][2]:.3f}"
        score = f", score {row['inception_score']:.2f}" if "inception_score" in row else ""
        rest = (epochs - epoch - 1) * seconds if epochs else 0  # the epochs left, at this pace
        took = f"about {rest:.0f} s" if rest < 120 else f"about {rest / 60:.0f} min"
        left = (f"; it took {seconds:.1f} s, so {took} for the {epochs - epoch - 1} left"
                if epochs and epochs > epoch + 1 else "")
        print(f"epoch {epoch + 1}{f'/{epochs}' if epochs else ''}: step {step}, "
              f"{row['images_per_s'] or 0:.0f} images/s" + (last if self.losses else "") + score
              + left, flush=True)
        return row

    def grids(self) -> list[Path]:
        return [self.directory / "grids" / row["grid"] for row in self.epochs]


def plan_session(saved_step: int, steps_per_epoch: int, epochs: int, seconds_per_epoch: float,
                 budget_s: float) -> SimpleNamespace:
    """This session's share of a run that stands at ``saved_step``.

    ``epochs``: the epoch to train to, the whole epochs that fit in ``budget_s`` at
    ``seconds_per_epoch`` (at least one, never past the run's ``epochs``). ``die_at``: the step
    before which the killed process dies, halfway through the share, while the run is short of
    its own halfway step (else None). ``line`` says how long the rest takes, and what fits."""
    total, done = epochs * steps_per_epoch, saved_step // steps_per_epoch
    fit = max(1, int(budget_s // max(seconds_per_epoch, 1e-9)))
    share = min(epochs, done + fit)
    die_at = (min(total // 2, saved_step + (share * steps_per_epoch - saved_step) // 2) + 1
              if saved_step < total // 2 else None)
    if done >= epochs:
        return SimpleNamespace(epochs=epochs, die_at=None, line="the run is complete.")
    line = (f"an epoch takes about {_duration(seconds_per_epoch)} here, so the {epochs - done} "
            f"epoch(s) left take about {_duration((epochs - done) * seconds_per_epoch)}, plus "
            "scoring and checkpoints; ")
    if share == epochs:
        line += f"they fit in the budget ({_duration(budget_s)}): this session trains them all."
    else:
        line += (f"the budget ({_duration(budget_s)}) fits {fit}: this session trains to epoch "
                 f"{share} of {epochs}, and a re-run with the same run_dir goes on from there.")
    return SimpleNamespace(epochs=share, die_at=die_at, line=line)


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def save_grid(images: np.ndarray, path, columns: int = 4) -> Path:
    """Save uint8 images (N, H, W, C) as one grid image (PNG)."""
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
    if use_drive == "auto":
        return (platform or detect_platform()) == "colab"
    return bool(use_drive)


def run_directory(run_dir: str, use_drive=False, platform: str | None = None) -> Path:
    """Where a run keeps its files: ``run_dir``, or inside Google Drive on Colab, so that
    checkpoints outlive the runtime (``use_drive`` "auto": on Colab). Mounting Drive asks for
    permission once. Prints which, and whether it survives a disconnect."""
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


def checkpoints_on_disk(directory) -> list[str]:
    """The checkpoints whose files are in ``directory`` (``ckpt-N.index``), oldest first, named
    as a manager names them: whatever the index file (``checkpoint``) lists, which Drive's sync
    or a copy of the ``ckpt-*`` files alone can lose or garble."""
    found = (re.fullmatch(r"ckpt-(\d+)\.index", p.name) for p in Path(directory).glob("ckpt-*"))
    steps = sorted(int(m[1]) for m in found if m)
    return [os.path.join(str(directory), f"ckpt-{n}") for n in steps]


def set_aside_unreadable_index(directory) -> None:
    """An index file TensorFlow cannot read (an emptied ``checkpoint``: its manager raises
    "Invalid checkpoint state") is renamed, not deleted, so that the run is read from its files
    (:func:`checkpoints_on_disk`) instead of stopping."""
    import tensorflow as tf

    index = Path(directory) / "checkpoint"
    try:
        tf.train.get_checkpoint_state(str(directory))
    except (ValueError, OSError):
        aside = index.with_name(f"checkpoint.unreadable-{time.time():.0f}")
        index.rename(aside)
        print(f"WARNING: the checkpoints' index could not be read; kept as {aside.name}.")


def inception_score(probabilities: np.ndarray) -> float:
    """exp(E_x KL(p(y|x) || p(y))): 1 for uninformative images, up to the class count."""
    p = np.clip(probabilities.astype("float64"), 1e-12, 1.0)
    marginal = p.mean(axis=0, keepdims=True)
    return float(np.exp(np.mean(np.sum(p * (np.log(p) - np.log(marginal)), axis=1))))


def frechet_distance(a: np.ndarray, b: np.ndarray, eps: float = 1e-6) -> float:
    """Fréchet distance between Gaussians fitted to two sets of feature vectors (rows).

    As in the reference implementations (the TTUR code that defined FID, and pytorch-fid):
    where the square root of the covariances' product is not finite (a singular product:
    early generators make near-identical images, and few samples give rank-deficient
    covariances), ``eps`` is added to both covariances' diagonals and the root taken again;
    its real part is used (rounding leaves a tiny imaginary one). Needs scipy.
    """
    from scipy import linalg

    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    if len(a) < 2 or len(b) < 2:
        raise ValueError(
            f"a Fréchet distance needs at least 2 feature vectors in each set, got {len(a)} "
            f"and {len(b)}"
        )
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a = np.atleast_2d(np.cov(a, rowvar=False))
    cov_b = np.atleast_2d(np.cov(b, rowvar=False))
    with warnings.catch_warnings():
        # a singular product is expected here, and handled below
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        root = linalg.sqrtm(cov_a @ cov_b)
        if not np.isfinite(root).all():
            offset = np.eye(len(cov_a)) * eps
            root = linalg.sqrtm((cov_a + offset) @ (cov_b + offset))
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2 * np.trace(np.real(root)))


class Scorer:
    """Trains (or loads from ``cache_dir``) the classifier, then scores batches of images."""

    def __init__(
        self,
        x_train,
        y_train,
        x_reference,
        classes: int,
        cache_dir,
        name: str,
        epochs: int | None = None,
        verbose: bool = True,
    ):
        import keras

        # about 20,000 images seen in training, whatever the data set's size
        epochs = epochs or min(30, max(3, 20_000 // max(1, len(x_train))))
        shape = tuple(x_train.shape[1:])
        tag = f"{name}_{'x'.join(map(str, shape))}_{len(x_train)}_{epochs}"
        path = Path(cache_dir) / f"scorer_{tag}.weights.h5"
        self.model = scoring_classifier(shape, classes)
        note = None
        if path.exists():
            try:
                self.model.load_weights(path)
                note = f"loaded the cached scoring classifier {path.name}"
            except Exception as error:  # a cut-short or damaged file: train it again
                print(f"Note: the cached {path.name} could not be read "
                      f"({type(error).__name__}): training it again")
        if note is None:
            keras.utils.set_random_seed(0)  # the same classifier, whenever it is trained
            self.model = scoring_classifier(shape, classes)
            self.model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
            self.model.fit(x_train / 255.0, y_train, epochs=epochs, batch_size=128, verbose=0)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"partial_{path.name}")  # whole, or not there at all
            self.model.save_weights(partial)
            os.replace(partial, path)
            note = f"trained the scoring classifier once and cached it as {path.name}"
        self.features = keras.Model(self.model.inputs, self.model.get_layer("features").output)
        self.reference = self._features(x_reference / 255.0)
        # the bar to aim at: real training images against the held-out reference
        self.real = self.score(x_train[: len(x_reference)] / 127.5 - 1.0)
        if verbose:
            print(
                f"{note}; real images: score {self.real['inception_score']:.2f}, "
                f"Fréchet distance {self.real['frechet_distance']:.2f}"
            )

    def _features(self, images01):
        return np.asarray(self.features.predict(images01, batch_size=256, verbose=0))

    def score(self, images) -> dict:
        """Scores for images in [-1, 1] (the generator's range)."""
        images01 = (np.asarray(images, dtype="float32") + 1.0) / 2.0
        probs = np.asarray(self.model.predict(images01, batch_size=256, verbose=0))
        return {
            "inception_score": inception_score(probs),
            "frechet_distance": frechet_distance(self._features(images01), self.reference),
        }


LAZY = ("FusedBatchNormalization", "HalfWordDropout")
_CLASSES: dict = {}
FUSED = "TensorFlow's fused kernel (FusedBatchNormV3)"
HALF_WORD = "16 random bits per element"
KERAS_OWN = "Keras's own ops"
#: The paths our layers took when they were last traced: ``{"batch norm": {path, ...}, ...}``.
USED: dict[str, set[str]] = {"batch norm": set(), "dropout": set()}


def describe() -> str:
    """One line saying how our batch norm and dropout computed in this process, e.g.
    ``batch norm: TensorFlow's fused kernel (FusedBatchNormV3); dropout: 16 random bits per
    element``, or Keras's own ops and why."""
    return "; ".join(
        f"{kind}: {' and '.join(sorted(paths)) if paths else 'not run yet'}"
        for kind, paths in USED.items()
    )


def _keras_backend() -> str:
    import keras

    return keras.backend.backend()


def __getattr__(name: str):
    """The layer classes, defined on first use: importing this module does not import Keras
    (the notebooks import TensorFlow quietly, through :func:`helpers.logs.import_tensorflow`)."""
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _CLASSES:
        _CLASSES.update(_define())
    return _CLASSES[name]


def _define() -> dict:
    import keras

    @keras.saving.register_keras_serializable(package="helpers")
    class FusedBatchNormalization(keras.layers.BatchNormalization):
        """``keras.layers.BatchNormalization`` computed by ``FusedBatchNormV3``.

        Falls back to Keras's own computation where the fused kernel does not apply:
        synchronized (cross-replica) statistics, batch renormalization, a mask, a normalised
        axis other than the last, inputs that are not 2-D or 4-D, no ``center``/``scale``, and
        bfloat16 on a GPU (the combination this course cannot test)."""

        def _unfusable(self, inputs, mask=None) -> str:
            """Why the fused kernel does not apply here ("" when it does). Chosen by feature:
            settings a Keras release lacks (Keras 3.10 has no ``renorm``) count as off."""
            if _keras_backend() != "tensorflow":
                return f"Keras runs on {_keras_backend()}"
            import tensorflow as tf

            rank = len(inputs.shape)
            reasons = {
                "no FusedBatchNormV3 here": not hasattr(tf.raw_ops, "FusedBatchNormV3"),
                "synchronized statistics": getattr(self, "synchronized", False),
                "batch renormalization": getattr(self, "renorm", False),
                "a mask": mask is not None,
                "no center or scale": not (self.center and self.scale),
                "not 2-D or 4-D": rank not in (2, 4),
                "a normalised axis other than the last": self.axis not in (-1, rank - 1),
                "bfloat16 on a GPU": inputs.dtype == tf.bfloat16
                and bool(tf.config.list_logical_devices("GPU")),
            }
            return next((reason for reason, applies in reasons.items() if applies), "")

        def call(self, inputs, training=None, mask=None):
            if reason := self._unfusable(inputs, mask):
                USED["batch norm"].add(f"{KERAS_OWN} ({reason})")
                return super().call(inputs, training=training, mask=mask)
            USED["batch norm"].add(FUSED)
            import tensorflow as tf

            channels = inputs.shape[-1]
            x = inputs if len(inputs.shape) == 4 else tf.reshape(inputs, [-1, 1, 1, channels])
            if self.compute_dtype != x.dtype.name:
                x = tf.cast(x, self.compute_dtype)
            stats = dict(
                scale=tf.convert_to_tensor(self.gamma.value),  # float32 (autocast=False)
                offset=tf.convert_to_tensor(self.beta.value),
                epsilon=self.epsilon,
                data_format="NHWC",
                exponential_avg_factor=1.0,
            )
            if training and self.trainable:
                empty = tf.constant([], tf.float32)
                y, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
                    x=x, mean=empty, variance=empty, is_training=True, **stats
                )
                # the kernel returns the unbiased variance; Keras averages the biased one
                n = tf.cast(tf.size(x) // channels, tf.float32)
                variance = variance * (n - 1.0) / tf.maximum(n, 1.0)
                momentum = self.momentum
                self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum))
                self.moving_variance.assign(
                    self.moving_variance * momentum + variance * (1.0 - momentum)
                )
            else:
                y, *_ = tf.raw_ops.FusedBatchNormV3(
                    x=x,
                    mean=tf.convert_to_tensor(self.moving_mean.value),
                    variance=tf.convert_to_tensor(self.moving_variance.value),
                    is_training=False,
                    **stats,
                )
            return y if len(inputs.shape) == 4 else tf.reshape(y, tf.shape(inputs))

    @keras.saving.register_keras_serializable(package="helpers")
    class HalfWordDropout(keras.layers.Dropout):
        """``keras.layers.Dropout`` that draws 16 random bits per element instead of 32.

        Keras draws one random float (32 bits of Philox output) per element; here each random
        32-bit word gives the masks of two elements (its low and high halves). The drop
        probability is ``round(rate * 65536) / 65536`` (0.300003 for 0.3), and kept values are
        scaled by its inverse, as Keras does. Seeds come from the layer's ``SeedGenerator``, as
        in Keras, so checkpoints and determinism work the same. A ``noise_shape`` falls back to
        Keras's own dropout."""

        def _keras_reason(self) -> str:
            """Why Keras's own dropout runs instead ("" when ours does), by feature."""
            threshold = round(self.rate * 65536)
            reasons = {
                f"Keras runs on {_keras_backend()}": _keras_backend() != "tensorflow",
                "this Keras's Dropout has no seed generator": not hasattr(self, "seed_generator"),
                "a noise_shape": self.noise_shape is not None,
                f"rate {self.rate}": not 0 < threshold < 65536,
            }
            return next((reason for reason, applies in reasons.items() if applies), "")

        def call(self, inputs, training=False):
            if not training:
                return super().call(inputs, training=training)
            if reason := self._keras_reason():
                USED["dropout"].add(f"{KERAS_OWN} ({reason})")
                return super().call(inputs, training=training)
            USED["dropout"].add(HALF_WORD)
            import tensorflow as tf

            threshold = round(self.rate * 65536)
            seed = self.seed_generator.next()
            if seed.dtype != tf.int32:  # as Keras does: stateless ops want int32 seeds under XLA
                seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
            size = tf.size(inputs)
            words = tf.random.stateless_uniform(
                [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
            )
            low = tf.bitwise.bitwise_and(words, tf.constant(0xFFFF, tf.uint32))
            high = tf.bitwise.right_shift(words, tf.constant(16, tf.uint32))
            halves = tf.concat([low, high], axis=0)[:size]
            keep = tf.reshape(halves >= tf.constant(threshold, tf.uint32), tf.shape(inputs))
            scale = tf.cast(65536 / (65536 - threshold), inputs.dtype)
            return tf.where(keep, inputs * scale, tf.zeros_like(inputs))

    return {"FusedBatchNormalization": FusedBatchNormalization, "HalfWordDropout": HalfWordDropout}


def check_parameters(*, dataset, architecture, epochs, budget_min, batch_size, d_steps, precision,
                     xla, max_images, checkpoint_every, run_dir, use_drive, fresh_start):
    """Notebook 04's parameters, checked before any work: one line names a wrong one."""
    in_drive = use_drive is True or (use_drive == "auto" and drive_wanted("auto"))
    return validate(
        dataset=(dataset, one_of(*data.DATASETS)),
        architecture=(architecture, architecture_rule(data.shape_of(dataset))),
        epochs=(epochs, integer(1, 10_000)),
        budget_min=(budget_min, number(0, 24 * 60)),
        batch_size=(batch_size, integer(2, 65536)),
        d_steps=(d_steps, integer(1, 10)),
        precision=(precision, one_of(*PRECISIONS)),
        xla=(xla, one_of(*XLA_CHOICES)),
        max_images=(max_images, integer(64, 10_000_000)),
        checkpoint_every=(checkpoint_every, integer(1, 1_000_000)),
        run_dir=(run_dir, folder(inside=workdirs.COLAB_DRIVE if in_drive else None)),
        use_drive=(use_drive, all_of(one_of(*USE_DRIVE), check(
            lambda v: v is not True or detect_platform() == "colab",
            "Google Drive can only be used on Colab"))),
        fresh_start=(fresh_start, boolean()),
    )
