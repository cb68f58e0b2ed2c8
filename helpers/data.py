"""MNIST, Fashion-MNIST, CIFAR-10, or offline (``COURSE_OFFLINE=1``) an announced fallback."""

import contextlib
import hashlib
import os
import socket
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

REAL = {  # the real data sets: image shape and class names
    "mnist": {"shape": (28, 28, 1), "classes": [str(d) for d in range(10)]},
    "fashion_mnist": {"shape": (28, 28, 1), "classes": [
        "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
        "Ankle boot"]},
    "cifar10": {"shape": (32, 32, 3), "classes": [
        "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]}}
DATASETS = (*REAL, "digits", "synthetic")  # and the offline ones, always available
OFFLINE_ENV = "COURSE_OFFLINE"
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"


def shape_of(name) -> tuple:
    """The image shape of data set ``name`` (MNIST's for any other value, refused later)."""
    return REAL[name if isinstance(name, str) and name in REAL else "mnist"]["shape"]


@dataclass
class ImageData:  # train and test images (uint8, NHWC), integer labels, and where they came from
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    source: str
    notes: list[str] = field(default_factory=list)  # why it fell back, where it did

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])


def save(images: ImageData, path) -> Path:
    """``images`` in one ``.npz`` file, for another process to read (:func:`load_saved`)."""
    np.savez(path, x_train=images.x_train, y_train=images.y_train, x_test=images.x_test,
             y_test=images.y_test, class_names=np.array(images.class_names),
             about=np.array([images.name, images.source]))
    return Path(path)


def load_saved(path) -> ImageData:
    with np.load(path, allow_pickle=False) as f:
        name, source = (str(v) for v in f["about"])
        return ImageData(name, f["x_train"], f["y_train"], f["x_test"], f["y_test"],
                         [str(c) for c in f["class_names"]], source)


def load(name: str = "mnist", *, limit: int | None = None, verbose: bool = True) -> ImageData:
    """``name`` as uint8 images (at most ``limit`` to train); falls back, saying so, offline."""
    if name not in DATASETS:
        raise ValueError(f"dataset={name!r} is unknown: use one of {', '.join(DATASETS)}")
    shape = shape_of(name)
    if name not in REAL:
        data = _digits(shape) if name == "digits" else _synthetic(shape)
    else:
        offline = os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes")
        data, reason = (None, f"{OFFLINE_ENV}=1 is set") if offline else _try_keras(name)
        if data is None:
            try:
                data = _digits(shape)
            except ImportError:  # no scikit-learn
                data = _synthetic(shape)
            data.name = f"{data.name} (standing in for {name})"
            data.notes += [f"Could not load {name} ({reason}).",
                           f"FELL BACK: using {data.source} instead of {name}; " + (
                               "the same ten digits, other images." if name == "mnist"
                               and "digits" in data.source else
                               f"the labels are {', '.join(data.class_names[:3])}, ..., not "
                               f"{name}'s classes.")]
    if limit is not None and limit < len(data.x_train):
        rng = np.random.default_rng(0)
        keep = rng.choice(len(data.x_train), size=limit, replace=False)
        test_size = min(len(data.x_test), max(1, limit // 5))
        keep_test = rng.choice(len(data.x_test), size=test_size, replace=False)
        data.x_train, data.y_train = data.x_train[keep], data.y_train[keep]
        data.x_test, data.y_test = data.x_test[keep_test], data.y_test[keep_test]
    if verbose:
        print(*data.notes, f"{data.name}: {len(data.x_train)} train + {len(data.x_test)} test "
              f"images of {data.shape}, {len(data.class_names)} classes; source: {data.source}",
              sep="\n")
    return data


def _try_keras(name: str) -> tuple[ImageData | None, str]:  # keras.datasets (MNIST: also without)
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
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # no log lines
                (x_train, y_train), (x_test, y_test) = getattr(keras.datasets, name).load_data()
            source = f"keras.datasets.{name}"
    except Exception as error:  # no network, a cut download, a corrupt cache file
        said = str(error).split(" -- ")[-1].strip("<>").split("] ")[-1][:99]  # no "[Errno -2]"
        failed = "fetch failure" in str(error) or isinstance(error, OSError)  # URLError too
        return None, f"{'the download failed' if failed else 'a damaged cache'}: {said}"
    finally:
        socket.setdefaulttimeout(previous)
    if x_train.ndim == 3:
        x_train, x_test = x_train[..., None], x_test[..., None]
    y_train, y_test = (y.reshape(-1).astype("int64") for y in (y_train, y_test))
    return ImageData(name, x_train, y_train, x_test, y_test, [*REAL[name]["classes"]], source), ""


def _mnist_without_keras():  # downloaded once into Keras's cache, checked (SHA-256)
    path = Path.home() / ".keras" / "datasets" / "mnist.npz"
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != MNIST_SHA256:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".npz.partial")
        with urllib.request.urlopen(MNIST_URL, timeout=20) as response:
            partial.write_bytes(response.read())
        if hashlib.sha256(partial.read_bytes()).hexdigest() != MNIST_SHA256:
            partial.unlink()
            raise OSError(f"{MNIST_URL} did not match its SHA-256")  # a failed download
        os.replace(partial, path)
    with np.load(path, allow_pickle=False) as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])


def _split(name, x, y, classes, source) -> ImageData:
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 6
    return ImageData(name, x[n_test:], y[n_test:], x[:n_test], y[:n_test], classes, source)


def _digits(shape) -> ImageData:  # scikit-learn's 8x8 digits, resized with MNIST's margins
    from sklearn.datasets import load_digits

    digits = load_digits()
    height, width, channels = shape
    pad_y, pad_x = round(height / 7), round(width / 7)
    inner = (width - 2 * pad_x, height - 2 * pad_y)
    out = np.zeros((len(digits.images), height, width), dtype=np.uint8)
    for i, image in enumerate(digits.images / 16.0):
        resized = Image.fromarray(np.uint8(image * 255)).resize(inner, Image.Resampling.BILINEAR)
        out[i, pad_y : pad_y + inner[1], pad_x : pad_x + inner[0]] = np.asarray(resized)
    images = np.repeat(out[..., None], channels, axis=-1)
    return _split("digits", images, digits.target.astype("int64"), [str(d) for d in range(10)],
                  f"scikit-learn's bundled 8x8 digits, resized to {height}x{width}")


def _synthetic(shape) -> ImageData:  # class k: a bright square at one of 10 places, plus noise
    rng = np.random.default_rng(0)
    height, width, channels = shape
    labels = rng.integers(0, 10, size=2400).astype("int64")
    images = rng.normal(0.1, 0.05, size=(len(labels), height, width))
    side = max(2, height // 5)
    for i, label in enumerate(labels):
        row, col = divmod(int(label), 5)
        top = (row * 2 + 1) * height // 5 - side // 2 + rng.integers(-1, 2)
        left = col * width // 5 + rng.integers(0, 2)
        images[i, max(top, 0) : top + side, max(left, 0) : left + side] += 0.8
    pixels = np.repeat(np.uint8(np.clip(images, 0, 1) * 255)[..., None], channels, axis=-1)
    classes = [f"square {k}" for k in range(10)]
    return _split("synthetic", pixels, labels, classes, "generated squares (synthetic)")


def repeat_to(images: np.ndarray, labels: np.ndarray, count: int):
    """A small data set repeated up to ``count`` examples (for timing), and a note saying so."""
    if len(images) >= count:
        return images[:count], labels[:count], ""
    index = np.resize(np.arange(len(images)), count)
    return images[index], labels[index], f"repeated {len(images)} images to {count} for timing"
