"""Score generated images offline: a small classifier trained once on the real data
(cached on disk) gives an Inception-Score-like figure and a Fréchet distance on its
features, without downloading Inception.

Higher score and lower distance are better; real images set the reference.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from helpers.models import scoring_classifier


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
        if path.exists():
            self.model.load_weights(path)
            note = f"loaded the cached scoring classifier {path.name}"
        else:
            keras.utils.set_random_seed(0)
            self.model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
            self.model.fit(x_train / 255.0, y_train, epochs=epochs, batch_size=128, verbose=0)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.model.save_weights(path)
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
