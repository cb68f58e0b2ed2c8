"""Image data sets: the real ones through Keras, or an announced offline fallback.

MNIST, Fashion-MNIST and CIFAR-10 come from ``keras.datasets`` when they can be
reached (or are already cached). Offline, or when ``COURSE_OFFLINE=1`` is set
(the test suite sets it), the loader falls back to scikit-learn's bundled 8x8
handwritten digits, resized and padded to the requested shape, or to generated
images; it always says so on screen. It never substitutes silently.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

#: Real data sets: image shape, class names and the Keras loader's name.
REAL = {
    "mnist": {"shape": (28, 28, 1), "classes": [str(d) for d in range(10)]},
    "fashion_mnist": {
        "shape": (28, 28, 1),
        "classes": [
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ],
    },
    "cifar10": {
        "shape": (32, 32, 3),
        "classes": [
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ],
    },
}
#: Offline data sets, always available: bundled digits and generated shapes.
OFFLINE = ("digits", "synthetic")
DATASETS = tuple(REAL) + OFFLINE


def shape_of(name) -> tuple:
    """The image shape of data set ``name``: MNIST's for the offline sets, and for any value
    that is no data set's name (a list, say), which the parameters cell then refuses."""
    known = isinstance(name, str) and name in REAL
    return REAL[name if known else "mnist"]["shape"]
OFFLINE_ENV = "COURSE_OFFLINE"


@dataclass
class ImageData:
    """Train and test images (uint8, NHWC) with integer labels, and where they came from."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    source: str
    fell_back: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])

    def summary(self) -> str:
        n_train, n_test = len(self.x_train), len(self.x_test)
        return (
            f"{self.name}: {n_train} train + {n_test} test images of {self.shape}, "
            f"{len(self.class_names)} classes; source: {self.source}"
        )


def save(images: ImageData, path) -> Path:
    """``images`` in one ``.npz`` file (arrays, names, source), for another process of the same
    run to read with :func:`load_saved` instead of loading the data set again."""
    np.savez(path, x_train=images.x_train, y_train=images.y_train, x_test=images.x_test,
             y_test=images.y_test, class_names=np.array(images.class_names),
             about=np.array([images.name, images.source]), fell_back=images.fell_back)
    return Path(path)


def load_saved(path) -> ImageData:
    """The :class:`ImageData` that :func:`save` wrote to ``path``."""
    with np.load(path, allow_pickle=False) as f:
        name, source = (str(v) for v in f["about"])
        return ImageData(name=name, x_train=f["x_train"], y_train=f["y_train"],
                         x_test=f["x_test"], y_test=f["y_test"],
                         class_names=[str(c) for c in f["class_names"]], source=source,
                         fell_back=bool(f["fell_back"]))


def offline_requested(environ=None) -> bool:
    """True when ``COURSE_OFFLINE`` is set to 1/true/yes (the test suite sets it)."""
    env = os.environ if environ is None else environ
    return env.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes")


def load(
    name: str = "mnist",
    *,
    shape: tuple[int, int, int] | None = None,
    limit: int | None = None,
    offline: bool | None = None,
    seed: int = 0,
    verbose: bool = True,
) -> ImageData:
    """Load ``name`` (one of :data:`DATASETS`) as uint8 images, falling back when offline.

    ``shape`` resizes the offline fallbacks (a real data set keeps its own
    shape; default: the real data set's shape). ``limit`` keeps at most that
    many training images (test images: a fifth of it). ``offline=True`` skips
    the download; ``None`` follows ``COURSE_OFFLINE``.
    """
    if name not in DATASETS:
        raise ValueError(f"dataset={name!r} is unknown: use one of {', '.join(DATASETS)}")
    if offline is None:
        offline, why = offline_requested(), f"{OFFLINE_ENV}=1 is set"
    else:
        why = "offline=True was asked for"
    target = shape or shape_of(name)
    data = None
    if name in REAL and not offline:
        data, reason = _try_keras(name)
    elif name in REAL:
        reason = why
    if data is None and name in REAL:
        data = _fallback(target, seed, replacing=name)
        data.notes.insert(0, f"Could not load {name} ({reason}).")
    elif data is None:
        data = _digits(target, seed) if name == "digits" else _synthetic(target, seed)
    data = _limit(data, limit, seed)
    if verbose:
        for note in data.notes:
            print(note)
        print(data.summary())
    return data


#: The file ``keras.datasets.mnist`` downloads, and its SHA-256, for loading MNIST where Keras is
#: not in use (notebook 09 runs PyTorch/XLA, and importing Keras there would start TensorFlow,
#: or fail where it is missing).
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"


def _try_keras(name: str) -> tuple[ImageData | None, str]:
    """The real data set, through ``keras.datasets`` where the notebook already imported Keras
    (on its own backend); else, for MNIST, the same file downloaded without Keras. Never imports
    an engine itself."""
    keras = sys.modules.get("keras")
    if keras is None and name != "mnist":
        return None, f"{name} loads through keras.datasets, and this notebook does not use Keras"
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(20)  # a blocked network fails in seconds, not minutes
    try:
        if keras is None:
            (x_train, y_train), (x_test, y_test) = _mnist_without_keras()
            source = f"{MNIST_URL} (the file keras.datasets.mnist reads)"
        else:
            (x_train, y_train), (x_test, y_test) = getattr(keras.datasets, name).load_data()
            source = f"keras.datasets.{name}"
    except Exception as error:  # no network, a cut download, a corrupt cache file
        return None, f"{type(error).__name__}: {str(error)[:160]}"
    finally:
        socket.setdefaulttimeout(previous)
    if x_train.ndim == 3:
        x_train, x_test = x_train[..., None], x_test[..., None]
    return (
        ImageData(
            name=name,
            x_train=x_train,
            y_train=y_train.reshape(-1).astype("int64"),
            x_test=x_test,
            y_test=y_test.reshape(-1).astype("int64"),
            class_names=list(REAL[name]["classes"]),
            source=source,
        ),
        "",
    )


def _mnist_without_keras(folder: Path | None = None):
    """MNIST's arrays from ``mnist.npz``, downloaded once into Keras's own cache folder
    (``~/.keras/datasets``), checked against its SHA-256, written whole or not at all."""
    folder = folder or Path.home() / ".keras" / "datasets"
    path = folder / "mnist.npz"
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != MNIST_SHA256:
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".npz.partial")
        with urllib.request.urlopen(MNIST_URL, timeout=20) as response:
            partial.write_bytes(response.read())
        if hashlib.sha256(partial.read_bytes()).hexdigest() != MNIST_SHA256:
            partial.unlink()
            raise ValueError(f"{MNIST_URL} did not match its SHA-256")
        os.replace(partial, path)
    with np.load(path, allow_pickle=False) as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])


def _fallback(shape, seed: int, replacing: str) -> ImageData:
    try:
        data = _digits(shape, seed)
    except ImportError:
        data = _synthetic(shape, seed)
    data.name = f"{data.name} (standing in for {replacing})"
    data.fell_back = True
    data.notes.append(
        f"FELL BACK: using {data.source} instead of {replacing}; "
        f"the labels are {', '.join(data.class_names[:3])}, ..., not {replacing}'s classes."
    )
    return data


def resize_and_pad(images: np.ndarray, shape, margin_fraction: float = 2 / 7) -> np.ndarray:
    """Resize float images (N, h, w) in [0, 1] into ``shape`` as uint8, with an MNIST-like margin.

    MNIST centres each 20x20 digit in a 28x28 frame (8/28 of the side is margin);
    the same fraction is used here. Channels are repeated when ``shape`` has 3.
    """
    height, width, channels = shape
    pad_y, pad_x = round(height * margin_fraction / 2), round(width * margin_fraction / 2)
    inner = (width - 2 * pad_x, height - 2 * pad_y)
    out = np.zeros((len(images), height, width), dtype=np.uint8)
    for i, image in enumerate(images):
        small = Image.fromarray(np.uint8(np.clip(image, 0, 1) * 255))
        out[i, pad_y : pad_y + inner[1], pad_x : pad_x + inner[0]] = np.asarray(
            small.resize(inner, Image.Resampling.BILINEAR)
        )
    return np.repeat(out[..., None], channels, axis=-1)


def _split(name, x, y, classes, source, seed, test_fraction=1 / 6) -> ImageData:
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = int(len(x) * test_fraction)
    return ImageData(name, x[n_test:], y[n_test:], x[:n_test], y[:n_test], classes, source)


def _digits(shape, seed: int) -> ImageData:
    from sklearn.datasets import load_digits  # bundled with scikit-learn, no download

    digits = load_digits()
    images = resize_and_pad(digits.images / 16.0, shape)
    source = f"scikit-learn's bundled 8x8 digits, resized to {shape[0]}x{shape[1]}"
    labels = digits.target.astype("int64")
    return _split("digits", images, labels, [str(d) for d in range(10)], source, seed)


def _synthetic(shape, seed: int, count: int = 2400) -> ImageData:
    """Generated images: class k is a bright square at one of 10 positions, plus noise."""
    rng = np.random.default_rng(seed)
    height, width, channels = shape
    labels = rng.integers(0, 10, size=count).astype("int64")
    images = rng.normal(0.1, 0.05, size=(count, height, width))
    side = max(2, height // 5)
    for i, label in enumerate(labels):
        row, col = divmod(int(label), 5)
        top = (row * 2 + 1) * height // 5 - side // 2 + rng.integers(-1, 2)
        left = col * width // 5 + rng.integers(0, 2)
        images[i, max(top, 0) : top + side, max(left, 0) : left + side] += 0.8
    pixels = np.uint8(np.clip(images, 0, 1) * 255)
    pixels = np.repeat(pixels[..., None], channels, axis=-1)
    classes = [f"square {k}" for k in range(10)]
    return _split("synthetic", pixels, labels, classes, "generated squares (synthetic)", seed)


def _limit(data: ImageData, limit: int | None, seed: int) -> ImageData:
    if limit is None or limit >= len(data.x_train):
        return data
    rng = np.random.default_rng(seed)
    keep = rng.choice(len(data.x_train), size=limit, replace=False)
    keep_test = rng.choice(
        len(data.x_test), size=min(len(data.x_test), max(1, limit // 5)), replace=False
    )
    data.x_train, data.y_train = data.x_train[keep], data.y_train[keep]
    data.x_test, data.y_test = data.x_test[keep_test], data.y_test[keep_test]
    return data


def repeat_to(images: np.ndarray, labels: np.ndarray, count: int):
    """Repeat a small data set up to ``count`` examples (for timing, not for accuracy).

    Returns ``(images, labels, note)``; the note says what was done, or is empty.
    """
    if len(images) >= count:
        return images[:count], labels[:count], ""
    index = np.resize(np.arange(len(images)), count)
    note = f"repeated {len(images)} images to {count} for timing"
    return images[index], labels[index], note
