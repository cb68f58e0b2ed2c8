"""Plumbing for notebook 03's input pipelines: data preparation and measurement.

The pipelines themselves (``from_tensor_slices``, TFRecords written as ``tf.train.Example``
and read with ``TFRecordDataset`` and ``interleave``, image folders, the cache, shuffle,
augment, batch, prefetch tail, ``ignore_errors``) are written in the notebook's own cells;
the ones other places reuse are in ``helpers.lessons.tfdata_pipelines``, generated from them.
What stays here is what the lesson is not about: writing an image folder to read from,
damaging a file on purpose, a memory-fit rule and timing epochs.
"""

from __future__ import annotations

from pathlib import Path


def write_image_folder(x, y, directory, class_names) -> int:
    """Save images as PNG files in one sub-folder per class; returns how many were written."""
    from PIL import Image

    directory = Path(directory)
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = directory / class_names[int(label)].replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        pixels = image[..., 0] if image.shape[-1] == 1 else image
        Image.fromarray(pixels).save(folder / f"{i:06d}.png")
    return len(x)


def corrupt_file(path, at: float = 0.5, length: int = 16) -> None:
    """Overwrite ``length`` bytes in the middle of a file (for demonstrations and tests)."""
    path = Path(path)
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + length] = b"\xff" * min(length, len(data) - start)
    path.write_bytes(bytes(data))


def fits_on_device(nbytes: int, free_bytes: int, margin: float = 0.5) -> bool:
    """Whether a data set of ``nbytes`` may be pinned on a device with ``free_bytes``,
    keeping ``margin`` of the memory for the model and its activations."""
    return nbytes <= free_bytes * (1 - margin)


def epoch_seconds(ds, epochs: int = 3) -> dict:
    """Iterate ``ds`` for ``epochs`` epochs: the first epoch apart (it fills caches and
    warms up), the steady state as the median of the rest."""
    from helpers.timing import measure, no_sync

    def one_epoch():
        for _ in ds:
            pass

    timing = measure(one_epoch, warmup=1, repeats=max(1, epochs - 1), sync=no_sync)
    return {"first_epoch_s": timing.first_call_s, "epoch_s": timing.median_s}
