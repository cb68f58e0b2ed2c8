import numpy as np
import pytest

from helpers import data, pipelines


@pytest.fixture(scope="module")
def digits():
    images = data.load("digits", verbose=False)
    return images.x_train[:120], images.y_train[:120], images.class_names


def count(ds):
    return sum(int(batch[0].shape[0]) for batch in ds)


def test_from_memory_order_and_shapes(tf, digits):
    x, y, _ = digits
    dropped = pipelines.from_memory(x, y, 32, shuffle=120, drop_remainder=True)
    batches = list(dropped)
    assert len(batches) == 120 // 32 and batches[0][0].shape == (32, 28, 28, 1)
    ds = pipelines.from_memory(x, y, 32, shuffle=120)
    first, second = [np.concatenate([b[1] for b in ds]) for _ in range(2)]
    assert sorted(first) == sorted(second) and list(first) != list(second)  # reshuffled


def test_augment_keeps_shape_dtype_and_label(tf, digits):
    x, y, _ = digits
    image, label = pipelines.augment(tf.constant(x[0]), tf.constant(y[0]))
    assert image.shape == x[0].shape and image.dtype == tf.uint8 and int(label) == y[0]


def test_from_generator_with_signature(tf, digits):
    x, y, _ = digits

    def examples():
        yield from zip(x[:10], y[:10], strict=True)

    assert count(pipelines.from_generator(examples, (28, 28, 1), 4)) == 10


@pytest.mark.parametrize("compression", [None, "none", "GZIP", "zlib"])
def test_tfrecords_round_trip(tf, digits, tmp_path, compression):
    x, y, _ = digits
    manifest = pipelines.write_tfrecords(x, y, tmp_path, shards=3, compression=compression)
    assert sum(manifest["files"].values()) == 120 and len(list(tmp_path.glob("part-*"))) == 3
    codec = {None: None, "none": None, "GZIP": "GZIP", "zlib": "ZLIB"}[compression]
    assert manifest["compression"] == codec
    ds, report = pipelines.read_tfrecords(tmp_path, 40, cache=False)
    batches = list(ds)  # one pass
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    order = np.lexsort((labels, images.reshape(len(images), -1).sum(1)))
    expected = np.lexsort((y, x.reshape(len(x), -1).sum(1)))
    assert (images[order] == x[expected]).all() and (labels[order] == y[expected]).all()
    assert report.skipped() == 0 and report.summary() == "All 120 records read; none skipped."


def test_an_unknown_compression_is_refused_in_one_line(tf, digits, tmp_path):
    from helpers.params import ParameterError

    x, y, _ = digits
    with pytest.raises(ParameterError, match=r"compression='LZ4'.*'GZIP', 'ZLIB'"):
        pipelines.write_tfrecords(x, y, tmp_path, compression="LZ4")
    assert not list(tmp_path.glob("part-*"))


@pytest.mark.parametrize("cache", [True, False])
def test_skips_are_counted_per_pass_with_or_without_a_cache(tf, digits, tmp_path, cache):
    """A cached pass never runs what is before the cache: counting there saw the first pass
    only (cached: 2 passes looked like 120 skipped), and without a cache the count grew each
    pass (uncached: skipped() went negative)."""
    x, y, _ = digits
    pipelines.write_tfrecords(x, y, tmp_path, shards=4)
    pipelines.corrupt_file(next(tmp_path.glob("part-00002-*")))
    ds, report = pipelines.read_tfrecords(tmp_path, 16, cache=cache, shuffle=64)
    per_pass = [count(ds) for _ in range(3)]
    assert per_pass[0] == per_pass[1] == per_pass[2] == report.delivered < 120
    assert report.skipped() == 120 - per_pass[0]
    assert report.summary().startswith(f"Skipped {120 - per_pass[0]} of 120 records")


def test_corrupt_tfrecord_is_skipped_and_counted(tf, digits, tmp_path):
    x, y, _ = digits
    pipelines.write_tfrecords(x, y, tmp_path, shards=4)
    pipelines.corrupt_file(next(tmp_path.glob("part-00002-*")))
    ds, report = pipelines.read_tfrecords(tmp_path, 16)
    delivered = count(ds)
    assert delivered == report.delivered < 120
    assert report.skipped() == 120 - delivered > 0
    assert report.summary().startswith(f"Skipped {120 - delivered} of 120 records")


def test_unreadable_images_are_skipped_and_counted(tf, digits, tmp_path):
    x, y, names = digits
    pipelines.write_image_folder(x[:30], y[:30], tmp_path, names)
    (tmp_path / names[int(y[0])] / "broken.png").write_bytes(b"not a png")
    (tmp_path / names[int(y[1])] / "empty.jpg").write_bytes(b"")
    ds, report, classes = pipelines.image_folder(tmp_path, (28, 28), 1, 8, shuffle=32)
    assert count(ds) == 30 and classes == sorted(classes)
    assert report.skipped() == 2
    assert report.summary() == "Skipped 2 of 32 image files (corrupt or unreadable); read 30."
    report.reset()
    assert report.delivered == 0


def test_options_and_device_fit(tf):
    opts = pipelines.options(deterministic=False, ram_budget_mb=512)
    assert opts.deterministic is False and opts.autotune.ram_budget == 512 * 2**20
    assert pipelines.fits_on_device(4 * 2**30, 16 * 2**30)
    assert not pipelines.fits_on_device(12 * 2**30, 16 * 2**30)


def test_epoch_seconds(tf, digits):
    x, y, _ = digits
    result = pipelines.epoch_seconds(pipelines.from_memory(x, y, 32), epochs=3)
    assert result["first_epoch_s"] > 0 and result["epoch_s"] > 0


def test_unoptimised_tail_has_no_cache_and_no_prefetch(tf, digits):
    x, y, _ = digits
    plain = pipelines.from_memory(x, y, 32, cache=False, prefetch=False)
    tuned = pipelines.from_memory(x, y, 32)
    assert "Prefetch" not in type(plain).__name__ and "Prefetch" in type(tuned).__name__
