"""Plumbing of notebook 04 (DCGAN), reused by 05, 06, 09: history, plots, scorer."""

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from helpers import data, workdirs
from helpers.devices import mixed_policy_for
from helpers.display import Table, subplots
from helpers.errors import invalid
from helpers.gpu_vs_cpu_benchmark import median_range, versus
from helpers.models import scoring_classifier
from helpers.params import all_of, check, enough_images, folder, integer, one_of, validate


def choose_precision(kind: str, requested: str = "auto") -> str:
    """The dtype policy: the device's mixed policy where one helps, unless one is forced."""
    if kind == "cpu":  # with oneDNN, Grappler's remapper off: it fails on D's gradient (TF 2.21)
        import tensorflow as tf
        from tensorflow.python.util import _pywrap_util_port  # TensorFlow's own "oneDNN on?"

        if _pywrap_util_port.IsMklEnabled():
            tf.config.optimizer.set_experimental_options({"remapping": False})
    return requested if requested != "auto" else (mixed_policy_for(kind) or "float32")


def choose_xla(kind: str, requested: str = "auto") -> bool:
    """XLA on accelerators, off on the CPU (where it was measured slower), unless forced."""
    return requested == "on" if requested != "auto" else kind in ("gpu", "tpu")


def to_gan_range(images):
    """uint8 images to float32 in [-1, 1], the generator's ``tanh`` range (for ``map``)."""
    import tensorflow as tf

    return tf.cast(images, tf.float32) / 127.5 - 1.0


def architecture_for(shape, requested: str = "auto") -> str:
    """ "tutorial" for 28x28 images and "dcgan" for 32x32 or 64x64, unless one is asked for."""
    auto = "tutorial" if tuple(shape[:2]) == (28, 28) else "dcgan"
    return auto if requested == "auto" else requested


def architecture_rule(shape):
    """A :mod:`helpers.params` rule: the architecture must fit the data set's image size."""
    fits = {"auto": True, "tutorial": tuple(shape[:2]) == (28, 28),
            "dcgan": shape[0] == shape[1] and shape[0] in (32, 64)}
    misfit = f"it does not make {shape[0]}x{shape[1]} images; use 'auto'"
    return all_of(one_of(*fits), check(lambda value: fits[value], misfit))


def fixed_noise(noise_dim: int = 100, count: int = 16) -> np.ndarray:
    """The noise vectors every grid of a run draws from (a History's: the first 16 of them)."""
    return np.random.default_rng(1234).standard_normal((count, noise_dim)).astype("float32")


class History:
    """A run's losses, epoch rows and grids in ``directory``, loaded up to a restored step."""
    def __init__(self, directory, noise_dim: int = 100, scorer=None):
        self.directory = Path(directory)
        (self.directory / "grids").mkdir(parents=True, exist_ok=True)
        self.scorer = scorer
        self.fixed_noise, self.score_noise = np.split(fixed_noise(noise_dim, 16 + 512), [16])
        self.losses, self.epochs = [], []
        self.since = 0  # the step this process's training went on from: end_epoch's pace
        self.path = self.directory / "history.json"

    def as_dict(self) -> dict:
        return {"losses": self.losses, "epochs": self.epochs}

    def save(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        with workdirs.saving(self.directory, temporary.name):  # a full disk: one line, no .tmp
            temporary.write_text(json.dumps(self.as_dict()))
            os.replace(temporary, self.path)

    def load(self, step: int) -> None:
        """The rows up to ``step``; a damaged file is set aside (renamed, never deleted)."""
        self.since = step
        try:
            saved = json.loads(self.path.read_text()) if self.path.exists() else {}
            self.losses = [[int(at), float(d), float(g)] for at, d, g in saved.get("losses", [])
                           if at <= step]
            self.epochs = [{**row, "epoch": int(row["epoch"]), "grid": str(row["grid"])}
                           for row in saved.get("epochs", []) if float(row["step"]) <= step]
        except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError):
            aside = self.path.rename(f"{self.path}.unreadable-{time.time():.0f}")
            print(f"WARNING: the loss history up to step {step} could not be read; it was set "
                  f"aside as {aside.name}, and the run goes on from its checkpoint without it.")
            self.losses, self.epochs = [], []

    def add_losses(self, pending) -> None:
        """``(step, d_loss, g_loss)`` tensors to rows: one wait for the device for the lot."""
        self.losses += [[step, float(d), float(g)] for step, d, g in pending]

    def end_epoch(self, generator, epoch: int, step: int, seconds: float, images: int,
                  epochs: int | None = None) -> dict:
        """Save the epoch's grid and score; print one line (with ``epochs``: the time left)."""
        grid = self.directory / "grids" / f"epoch_{epoch + 1:04d}.png"
        with workdirs.saving(self.directory, f"grids/{grid.name}"):
            Image.fromarray(_canvas(generator(self.fixed_noise, training=False))).save(grid)
        row = {"epoch": epoch + 1, "step": step, "seconds": seconds,
               "images_per_s": images / seconds if seconds else None, "grid": grid.name}
        if self.scorer is not None:
            row.update(self.scorer.score(generator(self.score_noise, training=False)))
        self.epochs.append(row)
        line = (f"epoch {epoch + 1}{f'/{epochs}' if epochs else ''}: step {step}, "
                f"{row['images_per_s'] or 0:.0f} images/s")
        if self.losses:
            line += f", d_loss {self.losses[-1][1]:.3f}, g_loss {self.losses[-1][2]:.3f}"
        if "inception_score" in row:
            line += f", score {row['inception_score']:.2f}"
        done, self.since = step - self.since, step  # this epoch's steps in this process
        if (left := (epochs or 0) * step // (epoch + 1) - step) > 0:  # steps, at this pace
            line += (f"; {done} step(s) in {duration(seconds)}, so about "
                     f"{duration(seconds / done * left)} for the {left} step(s) left")
        print(line, flush=True)
        return row

    def grids(self) -> list[Path]:
        return [self.directory / "grids" / row["grid"] for row in self.epochs]


def duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _canvas(generated, columns: int = 4) -> np.ndarray:  # (N, H, W, C) in [-1, 1]: a uint8 grid
    images = np.uint8(np.clip((np.asarray(generated, dtype="float32") + 1) * 127.5, 0, 255))
    n, h, w, c = images.shape
    rows = -(-n // columns)
    images = np.concatenate([images, np.zeros((rows * columns - n, h, w, c), np.uint8)])
    canvas = images.reshape(rows, columns, h, w, c).swapaxes(1, 2).reshape(rows * h, -1, c)
    return canvas[..., 0] if c == 1 else canvas


def show_grids(grids: dict):
    """Generator outputs side by side: ``{title: (N, H, W, C) in [-1, 1]}``."""
    fig, axes = subplots(1, len(grids), figsize=(2.6 * len(grids), 2.8), squeeze=False,
                         layout="tight")
    for ax, (title, generated) in zip(axes[0], grids.items(), strict=True):
        ax.imshow(_canvas(generated), cmap="gray", vmin=0, vmax=255)
        ax.set(title=title, xticks=[], yticks=[])
    return fig


def make_gif(grids: list[Path], path, scale: int = 4) -> Path:
    """An animated GIF of the epoch grids, ``scale`` times larger, each frame labelled by epoch."""
    grids = list(grids)
    if not grids:
        raise invalid("grids", [], "no epoch grids to animate; allowed: a list of one or more "
                      "grid images (History.grids() lists one per finished epoch)")
    frames = []
    for grid in grids:
        frame = Image.open(grid).convert("RGB")
        frame = frame.resize((frame.width * scale, frame.height * scale), Image.NEAREST)
        label = f"epoch {int(Path(grid).stem.rsplit('_', 1)[-1])}"  # epoch_0003.png
        ImageDraw.Draw(frame).text((4, 2), label, fill=(255, 64, 64))
        frames.append(frame)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=400, loop=0)
    return Path(path)


def plot_history(history: dict, real: dict | None = None, marks: dict | None = None,
                 verdicts: list | None = None):
    """Losses against equilibrium, epoch scores against real images'; ``marks``: {label: step};
    ``verdicts``: (step, D on real images, D on generated ones) rows, in a panel of their own."""
    from matplotlib.ticker import MaxNLocator

    panels = 3 + bool(verdicts)
    fig, axes = subplots(1, panels, figsize=(4.4 * panels, 3.5), layout="tight")
    if verdicts:
        game, *axes = axes
        rows = np.array([[float(value) for value in row] for row in verdicts])
        game.plot(rows[:, 0], rows[:, 1], color="C2", label="real images (held out)")
        game.plot(rows[:, 0], rows[:, 2], color="C3", label="generated images")
        game.axhline(0.5, linestyle=":", color="gray", label="1/2: cannot tell")
        game.set(xlabel="step", ylim=(0, 1), title="D's verdict: mean probability of real")
        game.legend(fontsize=7)
    left, mid, right = axes
    losses = np.array(history["losses"]) if history["losses"] else np.zeros((0, 3))
    left.plot(losses[:, 0], losses[:, 1], label="discriminator", linewidth=0.8)
    left.plot(losses[:, 0], losses[:, 2], label="generator", linewidth=0.8)
    for value, name, color in ((np.log(4), "D at equilibrium (ln 4)", "C0"),
                               (np.log(2), "G at equilibrium (ln 2)", "C1")):
        left.axhline(value, linestyle=":", color=color, label=name)
    for label, step in (marks or {}).items():
        left.axvline(step, color="red", linewidth=1)
        left.annotate(label, (step, left.get_ylim()[1]), color="red", va="top", fontsize=8)
    left.set(xlabel="step", title="losses")
    left.legend(fontsize=7)
    scored = [row for row in history["epochs"] if "inception_score" in row]
    for ax, key, title in ((mid, "inception_score", "classifier score (higher is better)"),
                           (right, "frechet_distance", "Fréchet distance (lower is better)")):
        ax.plot([r["epoch"] for r in scored], [r[key] for r in scored], marker="o",
                label="generated")
        if real:
            ax.axhline(real[key], linestyle="--", color="gray", label="real images")
        ax.set(xlabel="epoch", title=title)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.legend(fontsize=7)
    return fig


def ablation_table(rows: dict, rates: dict):
    """Each row's median images/s (min-max), over the tutorial's and the last row that ran's."""
    base, above, table = next(iter(rates.values())), None, []
    for name in rows:
        if name not in rates:
            table.append([name, "not applicable with this device's settings", "", ""])
            continue
        said = ["baseline", ""] if above is None else [versus(rates[name], base),
                                                      versus(rates[name], rates[above])]
        if above and table[-1][0] != above:  # rows that did not run lie between: name the one
            said[1] = f"against \"{above}\": {said[1]}"
        table.append([name, median_range(rates[name], 0, 1), *said])
        above = name
    return Table(table, ["step", "images/s: median (min-max)", "vs the tutorial's, by round",
                         "vs the last row that ran, by round"])


def plot_classes(generated, real, class_names):
    """Each class's share in generated images beside the real data's (a few tall bars: collapse)."""
    fig, ax = subplots(figsize=(8, 3), layout="tight")
    x = np.arange(len(class_names))
    for offset, (name, labels) in zip((-0.2, 0.2), (("generated", generated), ("real", real)),
                                      strict=True):
        share = np.bincount(np.asarray(labels), minlength=len(class_names)) / len(labels)
        ax.bar(x + offset, share, width=0.4, label=f"{name} ({len(labels)} images)")
    ax.set(xticks=x, xticklabels=class_names, ylabel="share of images",
           title="classes the scoring classifier sees")
    ax.legend()
    return fig


def inception_score(probabilities: np.ndarray) -> float:
    """exp(E_x KL(p(y|x) || p(y))): 1 for uninformative images, up to the class count."""
    p = np.clip(probabilities.astype("float64"), 1e-12, 1.0)
    marginal = p.mean(axis=0, keepdims=True)
    return float(np.exp(np.mean(np.sum(p * (np.log(p) - np.log(marginal)), axis=1))))


def frechet_distance(a: np.ndarray, b: np.ndarray, eps: float = 1e-6) -> float:
    """Fréchet distance of Gaussians fitted to two sets of rows (singular case: as pytorch-fid)."""
    from scipy import linalg

    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    if len(a) < 2 or len(b) < 2:
        raise ValueError("a Fréchet distance needs at least 2 feature vectors in each set, got "
                         f"{len(a)} and {len(b)}")
    cov_a, cov_b = (np.atleast_2d(np.cov(rows, rowvar=False)) for rows in (a, b))
    with warnings.catch_warnings():  # a singular product is expected here, and handled below
        warnings.simplefilter("ignore", RuntimeWarning)
        root = linalg.sqrtm(cov_a @ cov_b)
        if not np.isfinite(root).all():
            offset = np.eye(len(cov_a)) * eps
            root = linalg.sqrtm((cov_a + offset) @ (cov_b + offset))
    diff = a.mean(axis=0) - b.mean(axis=0)
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2 * np.trace(np.real(root)))


class Scorer:
    """Trains (or loads from ``cache_dir``) the classifier, then scores batches of images."""
    def __init__(self, x_train, y_train, x_reference, classes: int, cache_dir, name: str,
                 epochs: int | None = None, verbose: bool = True):
        import keras

        epochs = epochs or min(30, max(3, 20_000 // max(1, len(x_train))))  # ~20,000 images
        shape = tuple(x_train.shape[1:])
        tag = f"{name.split()[0]}_{'x'.join(map(str, shape))}_{len(x_train)}_{epochs}"
        path = Path(cache_dir) / f"scorer_{tag}.weights.h5"
        self.model, note = scoring_classifier(shape, classes), None
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
            with workdirs.saving(path.parent, partial.name):
                self.model.save_weights(partial)
                os.replace(partial, path)
            note = f"trained the scoring classifier and cached it as {path.name}"
        self.features = keras.Model(self.model.input, self.model.get_layer("features").output)
        self.reference = self._run(self.features, x_reference / 255.0)
        self.real = self.score(x_train[:512] / 127.5 - 1.0)  # the bar to aim at: 512 real images
        if verbose:
            print(f"{note}; real images: score {self.real['inception_score']:.2f}, "
                  f"Fréchet distance {self.real['frechet_distance']:.2f}")

    @staticmethod
    def _run(model, images01) -> np.ndarray:  # called, not predict(): nothing traced anew
        return np.concatenate([np.asarray(model(images01[i : i + 256], training=False))
                               for i in range(0, len(images01), 256)])

    def classify(self, images) -> np.ndarray:  # images in [-1, 1]: each one's likeliest class
        return self._run(self.model, (np.asarray(images) + 1.0) / 2.0).argmax(axis=1)

    def score(self, images) -> dict:  # images in [-1, 1], the generator's range
        images01 = (np.asarray(images, dtype="float32") + 1.0) / 2.0
        features = self._run(self.features, images01)
        return {"inception_score": inception_score(self._run(self.model, images01)),
                "frechet_distance": frechet_distance(features, self.reference)}


def gan_rules(*, dataset, architecture, epochs, batch_size, d_steps, precision, xla,
              max_images) -> dict:
    """The rules of the GAN's parameters, notebook 04's and 05's, for :func:`validate`."""
    return dict(
        dataset=(dataset, one_of(*data.DATASETS)),
        architecture=(architecture, architecture_rule(data.shape_of(dataset))),
        epochs=(epochs, integer(1, 10_000)),
        batch_size=(batch_size, integer(2, 65536)),
        d_steps=(d_steps, integer(1, 10)),
        precision=(precision, one_of("auto", "float32", "mixed_float16", "mixed_bfloat16")),
        xla=(xla, one_of("auto", "on", "off")),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(batch_size, batches=1, name="batch_size"))))


def check_parameters(*, work_dir, **gan):
    """Notebook 04's parameters, checked before any work: one line names a wrong one."""
    return validate(**gan_rules(**gan), work_dir=(work_dir, folder()))
