"""Plumbing of notebook 06 (data parallel), reused by 08, 09 and 10."""

from helpers.devices import accelerator_rule
from helpers.models import replica_classifier
from helpers.params import all_of, check, enough_images, folder, integer, one_of, validate
from helpers.timing import epoch_timer, steady_state
from helpers.yardstick import flat


def expected_replicas(accelerator: object, logical_devices: object, gpus: int, tpu_usable: bool):
    """The replicas notebook 06's strategy will make (None on a TPU: checked once connected)."""
    if tpu_usable and accelerator in ("auto", "tpu"):
        return None
    if gpus > 1 and accelerator in ("auto", "gpu"):
        return gpus
    return logical_devices if type(logical_devices) is int and 1 <= logical_devices <= 64 else 1


def batch_rule(replicas: int | None):
    """A :mod:`helpers.params` rule: the global batch splits evenly across known replicas."""
    if replicas is None:
        return integer(1, 10_000_000)
    return check(lambda v: type(v) is int and v >= replicas and v % replicas == 0,
                 f"the global batch must be a positive multiple of the {replicas} replicas "
                 f"(e.g. {replicas * 16})")


def in_memory_dataset(x, y, global_batch: int, shuffle: bool = True):
    """Full global batches (static per-replica shapes, as a TPU needs), sharded by data."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=0)
    ds = ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def compile_classifier(model, steps_per_execution: int = 1, learning_rate: float = 0.005):
    import keras

    # SGD at 0.1 sent the first epoch's loss to 10-14 here before it recovered; this descends
    model.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
    return model


def classifier_step_results(runs: dict, x, y, synchronized: bool = True) -> dict:
    """Per ``{name: (strategy, dtype)}``: the loss and the update (flat, float64) of one ``fit``
    step on ``x, y``, every run from the same weights; a float64 run is the yardstick's."""
    import keras

    results, start = {}, None
    for name, (strategy, dtype) in runs.items():
        keras.mixed_precision.set_global_policy(dtype)
        keras.config.set_floatx(dtype)
        try:
            with strategy.scope():
                keras.utils.set_random_seed(0)
                model = replica_classifier(x.shape[1:], synchronized=synchronized)
                compile_classifier(model, learning_rate=1000.0)  # far: see helpers.yardstick
        finally:
            keras.config.set_floatx("float32")
            keras.mixed_precision.set_global_policy("float32")
        start = start or model.get_weights()
        model.set_weights([w.astype(dtype) for w in start])
        history = model.fit(in_memory_dataset(x, y, len(x), shuffle=False), epochs=1, verbose=0,
                            shuffle=False)
        results[name] = {"loss": history.history["loss"][-1],
                         "update": flat(model.get_weights()) - flat(start)}
    return results


def fit_classifier(strategy, x, y, global_batch: int, epochs: int = 2,
                   steps_per_execution: int = 1, synchronized: bool = True) -> dict:
    """Loss and images/s under ``strategy`` (keras#19246: Mirrored needs steps_per_execution=1)."""
    with strategy.scope():
        model = compile_classifier(replica_classifier(x.shape[1:], synchronized=synchronized),
                                   steps_per_execution)
    timer = epoch_timer()
    # one iterator for the whole fit: a new one per epoch took 0.5-8 s to release on 8 CPU replicas
    steps = len(x) // global_batch
    history = model.fit(in_memory_dataset(x, y, global_batch).repeat(), epochs=epochs,
                        steps_per_epoch=steps, verbose=0, callbacks=[timer], shuffle=False)
    return {"loss": history.history["loss"],
            "images_per_s": steps * global_batch / steady_state(timer.seconds)}


def tpu_batch_advice(global_batch: int, replicas: int) -> str:
    """TPU cores multiply 128x128 tiles: per-core batches that are multiples of 128 fill them."""
    per_core = global_batch // replicas
    if per_core % 128 == 0:
        return f"{per_core} images per TPU core: a multiple of 128, as TPU cores like."
    return (f"{per_core} images per TPU core: prefer a multiple of 128 (a global batch that is "
            f"a multiple of {128 * replicas}).")


def check_parameters(*, tpu, accelerator, logical_devices, global_batch_size, epochs,
                     steps_per_execution, steps_per_call, max_images, precision, work_dir):
    """Notebook 06's parameters (``tpu``: what detect_tpu found): one line names a wrong one."""
    import tensorflow as tf

    replicas = expected_replicas(accelerator, logical_devices,
                                 len(tf.config.list_physical_devices("GPU")), tpu.usable)
    return validate(
        accelerator=(accelerator, accelerator_rule(tpu)),
        logical_devices=(logical_devices, integer(1, 64)),
        global_batch_size=(global_batch_size, batch_rule(replicas)),
        epochs=(epochs, integer(2, 1000)),
        steps_per_execution=(steps_per_execution, integer(1, 10_000)),
        steps_per_call=(steps_per_call, integer(1, 10_000)),
        max_images=(max_images, all_of(integer(64, 10_000_000),
                                       enough_images(global_batch_size, batches=1))),
        precision=(precision, one_of("auto", "float32", "mixed_float16", "mixed_bfloat16")),
        work_dir=(work_dir, folder()))


def check_batch(global_batch_size, replicas: int):
    """Notebook 06's ``global_batch_size`` checked again, against its strategy's replicas."""
    return validate(echo=False, global_batch_size=(global_batch_size, batch_rule(replicas)))
