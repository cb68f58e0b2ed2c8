import hashlib
import io
import sys
import urllib.request

import numpy as np
import pytest

from helpers import data


def test_offline_mnist_falls_back_to_bundled_digits_and_says_so(capsys):
    images = data.load("mnist")
    out = capsys.readouterr().out
    assert "Could not load mnist (COURSE_OFFLINE=1 is set)." in out
    assert "FELL BACK" in out and "scikit-learn" in out
    assert images.notes and "standing in for mnist" in images.name
    assert images.x_train.shape[1:] == (28, 28, 1) and images.x_train.dtype == np.uint8
    assert len(images.x_train) + len(images.x_test) == 1797
    assert set(np.unique(images.y_train)) == set(range(10))


def test_offline_cifar10_has_cifar_shape():
    images = data.load("cifar10", verbose=False)
    assert images.x_train.shape[1:] == (32, 32, 3) and images.notes


def test_digits_are_centred_like_mnist():
    images = data.load("digits", verbose=False)  # in MNIST's shape
    border = np.concatenate([images.x_train[:, :4].ravel(), images.x_train[:, -4:].ravel()])
    assert border.max() == 0 and images.x_train[:, 4:24].max() > 200
    assert not images.notes  # digits asked for is digits given


def test_synthetic_classes_differ():
    images = data.load("synthetic", verbose=False)
    means = [images.x_train[images.y_train == k].mean(axis=0) for k in range(10)]
    assert min(np.abs(means[a] - means[b]).max() for a in range(10) for b in range(a)) > 50


def test_limit():
    images = data.load("digits", limit=100, verbose=False)
    assert len(images.x_train) == 100 and len(images.x_test) == 20


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(ValueError, match="imagenet.*mnist, fashion_mnist, cifar10"):
        data.load("imagenet")


@pytest.fixture
def online(monkeypatch):
    """As a learner's runtime is: COURSE_OFFLINE (set by the test suite) unset."""
    monkeypatch.delenv(data.OFFLINE_ENV, raising=False)


def test_keras_is_used_when_reachable(monkeypatch, online):
    import keras

    x = np.full((5, 28, 28), 7, dtype=np.uint8)
    y = np.arange(5, dtype=np.uint8)
    monkeypatch.setattr(keras.datasets.fashion_mnist, "load_data", lambda: ((x, y), (x, y)))
    images = data.load("fashion_mnist", verbose=False)
    assert not images.notes and images.source == "keras.datasets.fashion_mnist"
    assert images.x_train.shape == (5, 28, 28, 1) and images.class_names[9] == "Ankle boot"


def test_a_failed_download_falls_back_with_the_reason(monkeypatch, capsys, online):
    import keras

    def fail():  # as keras.utils.get_file does: its line first, then the failure
        print("Downloading data from https://storage.googleapis.com/.../mnist.npz")
        raise Exception("URL fetch failure on https://x/mnist.npz: None -- [Errno -2] Name or "
                        "service not known")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", fail)
    images = data.load("mnist")
    assert images.notes
    out = capsys.readouterr().out
    assert ("Could not load mnist (the download failed: Name or service not known)."
            in out), "the reason, without the URL's or the errno's noise"
    assert "Downloading" not in out, "Keras's download line reached the output"


def test_repeat_to_for_timing():
    x, y = np.arange(5)[:, None], np.arange(5)
    x2, y2, note = data.repeat_to(x, y, 12)
    assert len(x2) == 12 and list(y2[:7]) == [0, 1, 2, 3, 4, 0, 1] and "repeated 5" in note
    x3, _, note = data.repeat_to(x, y, 3)
    assert len(x3) == 3 and note == ""


def _fake_npz():
    x = np.zeros((6, 28, 28), "uint8")
    y = np.arange(6, dtype="uint8") % 10
    buffer = io.BytesIO()
    np.savez(buffer, x_train=x, y_train=y, x_test=x[:2], y_test=y[:2])
    return buffer.getvalue()


def test_mnist_without_keras_downloads_keras_file_once_checked(monkeypatch, tmp_path, online):
    """Notebook 10 uses no Keras: MNIST comes from the file keras.datasets reads, downloaded
    once into the same cache, checked against its SHA-256, never left half-written."""
    payload, calls = _fake_npz(), []

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return payload

    def urlopen(url, timeout):
        calls.append(url)
        return Response()

    monkeypatch.setitem(sys.modules, "keras", None)  # this notebook never imported Keras
    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(data.Path, "home", lambda: tmp_path)
    monkeypatch.setattr(data, "MNIST_SHA256", hashlib.sha256(payload).hexdigest())
    images = data.load("mnist", verbose=False)
    assert not images.notes and images.source.startswith(data.MNIST_URL)
    assert images.x_train.shape == (6, 28, 28, 1) and calls == [data.MNIST_URL]
    data.load("mnist", verbose=False)
    assert calls == [data.MNIST_URL], "the cached file is used the second time"
    monkeypatch.setattr(data, "MNIST_SHA256", "0" * 64)  # the cache and the download disagree
    bad = data.load("mnist", verbose=False)
    assert "the download failed: " in bad.notes[0] and "did not match its SHA-256" in bad.notes[0]
    assert sorted(p.name for p in (tmp_path / ".keras" / "datasets").iterdir()) == ["mnist.npz"]


def test_other_data_sets_without_keras_fall_back_and_say_why(monkeypatch, online):
    monkeypatch.setitem(sys.modules, "keras", None)
    images = data.load("fashion_mnist", verbose=False)
    assert "does not use Keras" in images.notes[0]


def test_images_handed_to_another_process_come_back_the_same(tmp_path):
    """Notebook 04's training child reads the kernel's images from a file (data.save), so it
    never loads or downloads the data set again."""
    images = data.load("digits", limit=300, verbose=False)
    back = data.load_saved(data.save(images, tmp_path / "images.npz"))
    for name in ("name", "source", "class_names"):
        assert getattr(back, name) == getattr(images, name)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(back, name), getattr(images, name))
        assert getattr(back, name).dtype == getattr(images, name).dtype
    assert back.class_names == images.class_names and back.shape == images.shape
