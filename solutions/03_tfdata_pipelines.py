"""Solutions to notebook 03's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 03.1: reorder a slow tf.data chain
def slow_chain(records, decode, augment, batch_size):
    ds = records.prefetch(tf.data.AUTOTUNE).shuffle(10_000)  # prefetch first; shuffles records
    ds = ds.map(decode).cache()  # one record at a time; caches the first epoch's order
    return ds.map(augment).batch(batch_size)  # one example at a time


def fast_chain(records, decode, augment, batch_size):
    """The examples of `slow_chain`: decoded, cached, shuffled, augmented, in the right order."""
    ds = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
    ds = ds.shuffle(10_000).map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch_size).prefetch(tf.data.AUTOTUNE)


paths = [str(work / "tfrecords" / name) for name in sorted(manifest["files"])]
records = tf.data.Dataset.from_tensor_slices(paths).interleave(
    lambda p: tf.data.TFRecordDataset(p, compression_type=manifest["compression"]))
chains = {chain.__name__: chain(records, parse_fn(manifest["shape"]), augment, params.batch_size)
          for chain in (slow_chain, fast_chain)}
timed = tfdata_pipelines.alternately(  # an epoch of each in turn: the first fills their caches
    {name: (lambda ds=ds: [None for _ in ds], tf.test.experimental.sync_devices)
     for name, ds in chains.items()}, params.epochs - 1, warm=False)
took = {name: [t.first_call_s, *t.samples_s] for name, t in timed.items()}
later = {name: statistics.median(s[1:]) for name, s in took.items()}
for name, s in took.items():
    print(f"{name}: first epoch {s[0]:.3f} s, then {later[name]:.3f} s per epoch (median)")
ratios = [s / f for s, f in zip(took["slow_chain"][1:], took["fast_chain"][1:], strict=True)]
print("slow_chain's time over fast_chain's (above 1: fast_chain is faster): first epoch "
      f"{took['slow_chain'][0] / took['fast_chain'][0]:.2f} (one epoch each), then "
      f"{later['slow_chain'] / later['fast_chain']:.2f} (medians), on {kinds['cpu']}, "
      f"{manifest['records']} images; the later epochs, round by round: "
      + tfdata_pipelines.called(ratios, 1, ("fast_chain faster", "fast_chain slower")) + ".")


# Exercise 03.2: skip the files that do not decode
def load_images(paths, labels):
    """(image, label) pairs from image files; a file that does not decode is skipped."""
    def load(path, label):
        return tf.io.decode_image(tf.io.read_file(path), 1, expand_animations=False), label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    return ds.map(load, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()  # after the map


files = sorted(str(p) for p in (work / "images").glob("*/*"))
labels = [classes.index(Path(p).parent.name) for p in files]
read = count_examples(load_images(files, labels).batch(params.batch_size))
print(f"load_images read {read} of the {len(files)} files in {work / 'images'}")


# Exercise 03.3: slice shuffled batches on the device
def device_epoch(x, y, batch_size):
    """One shuffled epoch of (x, y) batches, sliced where `x` and `y` live."""
    order = tf.argsort(tf.random.uniform(tf.shape(x)[:1]))  # one order, made on x's device
    for start in range(0, int(x.shape[0]), batch_size):
        index = order[start:start + batch_size]
        yield tf.gather(x, index), tf.gather(y, index)


with tf.device(device):
    sizes = [int(yb.shape[0]) for _, yb in device_epoch(x_on_device, y_on_device, 100)]
print(f"device_epoch: {sum(sizes)} of {len(x)} examples in {len(sizes)} batches of at most "
      f"100, sliced on {x_on_device.device}")
