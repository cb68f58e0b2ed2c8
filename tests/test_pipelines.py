"""Notebook 03's pipelines (``helpers.lessons.nb03``, generated from its
``#@save`` cells) and the plumbing left in ``helpers.tfdata_pipelines``."""

import os
import time

import numpy as np
import pytest

from helpers import data, tfdata_pipelines


@pytest.fixture(scope="module")
def digits():
    images = data.load("digits", verbose=False)
    return images.x_train[:120], images.y_train[:120], images.class_names


@pytest.fixture(scope="module")
def lesson(tf):
    from helpers.lessons import nb03 as lesson

    return lesson


def test_the_tail_batches_and_reshuffles_each_epoch(tf, lesson, digits):
    x, y, _ = digits
    ds = lesson.finish(tf.data.Dataset.from_tensor_slices((x, y)), 32, shuffle=120)
    batches = list(ds)
    assert [len(b[0]) for b in batches] == [32, 32, 32, 24]
    assert batches[0][0].shape[1:] == (28, 28, 1)
    first, second = [np.concatenate([b[1] for b in ds]) for _ in range(2)]
    assert sorted(first) == sorted(second) and list(first) != list(second)  # reshuffled
    assert lesson.count_examples(ds) == 120


def test_unoptimised_tail_has_no_cache_and_no_prefetch(tf, lesson, digits):
    x, y, _ = digits
    source = tf.data.Dataset.from_tensor_slices((x, y))
    plain = lesson.finish(source, 32, cache=False, prefetch=False)
    tuned = lesson.finish(source, 32)
    assert "Prefetch" not in type(plain).__name__ and "Prefetch" in type(tuned).__name__


def test_augment_keeps_shape_dtype_and_label(tf, lesson, digits):
    x, y, _ = digits
    image, label = lesson.augment(tf.constant(x[0]), tf.constant(y[0]))
    assert image.shape == x[0].shape and image.dtype == tf.uint8 and int(label) == y[0]


def test_an_example_parses_back_to_its_image_and_label(tf, lesson, digits):
    x, y, _ = digits
    image, label = lesson.parse_fn(x.shape[1:])(tf.constant(lesson.to_example(x[5], y[5])))
    assert (image.numpy() == x[5]).all() and int(label) == y[5]


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_tfrecords_round_trip(tf, lesson, digits, tmp_path, compression):
    x, y, _ = digits
    manifest = lesson.write_tfrecords(x, y, tmp_path, shards=3, compression=compression)
    assert sum(manifest["files"].values()) == 120 and len(list(tmp_path.glob("part-*"))) == 3
    assert manifest["compression"] == (compression or "")
    batches = list(lesson.read_tfrecords(tmp_path, 40, cache=False))  # one pass
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    order = np.lexsort((labels, images.reshape(len(images), -1).sum(1)))
    expected = np.lexsort((y, x.reshape(len(x), -1).sum(1)))
    assert (images[order] == x[expected]).all() and (labels[order] == y[expected]).all()


@pytest.mark.parametrize("cache", [True, False])
def test_a_corrupt_tfrecord_is_skipped_the_same_way_every_pass(tf, lesson, digits, tmp_path, cache):
    x, y, _ = digits
    lesson.write_tfrecords(x, y, tmp_path, shards=4)
    tfdata_pipelines.corrupt_file(next(tmp_path.glob("part-00002-*")))
    ds = lesson.read_tfrecords(tmp_path, 16, cache=cache, shuffle=64)
    per_pass = [lesson.count_examples(ds) for _ in range(3)]
    assert per_pass[0] == per_pass[1] == per_pass[2]
    assert 90 <= per_pass[0] < 120  # the other three shards (90 records) are all read


def test_unreadable_images_are_skipped(tf, lesson, digits, tmp_path):
    x, y, names = digits
    tfdata_pipelines.write_image_folder(x[:30], y[:30], tmp_path, names)
    assert len(list(tmp_path.glob("*/*.png"))) == 30
    (tmp_path / names[int(y[0])] / "broken.png").write_bytes(b"not a png")
    (tmp_path / names[int(y[1])] / "empty.jpg").write_bytes(b"")
    ds, classes = lesson.image_folder(tmp_path, (28, 28), 1, 8, shuffle=32)
    assert lesson.count_examples(ds) == 30 and classes == sorted(classes)
    labels = np.concatenate([b[1] for b in ds])
    assert sorted(labels) == sorted(classes.index(names[int(v)]) for v in y[:30])


def test_an_image_folder_is_read_with_the_read_it_is_given(tf, lesson, digits, tmp_path):
    x, y, names = digits
    tfdata_pipelines.write_image_folder(x[:10], y[:10], tmp_path, names)
    paths = []

    def counted(path):  # tf.io.read_file, and the path it read
        def read(p):
            paths.append(p.numpy())
            return tf.io.read_file(p)

        return tf.py_function(read, [path], tf.string)

    ds, _ = lesson.image_folder(tmp_path, (28, 28), 1, 4, read=counted, cache=False)
    assert lesson.count_examples(ds) == 10 and len(set(paths)) == 10


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An ``nvidia-smi`` on PATH that prints a utilisation of 37 every 20 ms until stopped,
    and records its process id and the arguments it was given."""
    script = tmp_path / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\necho $$ > {tmp_path}/pid\necho "$@" > {tmp_path}/args\n'
        "while true; do echo 37; sleep 0.02; done\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return tmp_path


def test_gpu_utilisation_is_sampled_while_the_work_runs(lesson, fake_nvidia_smi):
    samples = lesson.gpu_utilisation_during(lambda: time.sleep(0.5), interval_ms=20)
    assert samples and set(samples) == {37}
    args = (fake_nvidia_smi / "args").read_text().split()
    assert "--query-gpu=utilization.gpu" in args and "-lms" in args


def test_the_sampler_stops_when_the_work_fails(lesson, fake_nvidia_smi):
    started = []

    def work():
        time.sleep(0.2)
        started.append(True)
        raise RuntimeError("training failed")

    with pytest.raises(RuntimeError, match="training failed"):
        lesson.gpu_utilisation_during(work, interval_ms=20)
    assert started
    pid = int((fake_nvidia_smi / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # the sampler was ended and reaped
        os.kill(pid, 0)
