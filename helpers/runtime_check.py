"""Plumbing of notebook 01: GPU advice that TF and Keras 3 removed, what replaced it, probed."""

from collections.abc import Callable

import numpy as np

from helpers import data, devices
from helpers.params import all_of, integer, one_of, validate


def _has(path: str) -> Callable[[], str]:  # probe: does ``tf.<path>``/``keras.<path>`` exist?
    def probe() -> str:
        import keras
        import tensorflow as tf

        root, *parts = path.split(".")
        obj = {"tf": tf, "keras": keras}[root]
        for part in parts:
            obj = getattr(obj, part, None)
        return "gone" if obj is None else "still present"

    return probe


def _installed(name: str, absent: str) -> Callable[[], str]:  # probe: is pip's `name` here?
    return lambda: f"{found} installed" if (found := devices._version(name)) else absent


def _gpu_device_name() -> str:
    import tensorflow as tf

    said = f"gpu_device_name() returns {tf.test.gpu_device_name()!r}"  # is_gpu_available(): not run
    return said + (" (no GPU: an empty string, easy to miss)" if said.endswith("''") else "")


def _refused(attempt: Callable[[object], object]) -> Callable[[], str]:  # probe: Keras refuses?
    def probe() -> str:
        import keras

        try:  # Keras checks the arguments first; where it accepts them, nothing is kept
            attempt(keras)
        except (TypeError, ValueError) as error:
            return f"raises {type(error).__name__}: {str(error).split(' (Keras')[0]}"
        return "still accepted"

    return probe


def _fit_with_workers(keras) -> None:  # where still accepted: one epoch on two numbers
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((2, 1), dtype="float32")
    model.fit(x, x, workers=2, use_multiprocessing=True, verbose=0)


MIGRATIONS = [  # (seen in blog posts, what replaced it, what this runtime does with the old)
    ("pip install tensorflow-gpu",
     "pip install 'tensorflow[and-cuda]' (Linux); on Colab keep the preinstalled TF",
     _installed("tensorflow-gpu", "not installed (good)")),
    ("tf.keras.mixed_precision.experimental.set_policy(...)",
     "keras.mixed_precision.set_global_policy('mixed_float16' or 'mixed_bfloat16')",
     _has("keras.mixed_precision.experimental")),
    ("keras.utils.multi_gpu_model(model, gpus=N)",
     "tf.distribute.MirroredStrategy(); build and compile inside strategy.scope()",
     _has("keras.utils.multi_gpu_model")),
    ("tf.ConfigProto(gpu_options=...allow_growth=True)",
     "tf.config.experimental.set_memory_growth(gpu, True), before the first op",
     _has("tf.ConfigProto")),
    ("tf.test.gpu_device_name() / tf.test.is_gpu_available()",
     "tf.config.list_physical_devices('GPU')", _gpu_device_name),
    ("optimizer.get_scaled_loss(loss)",
     "keras.optimizers.LossScaleOptimizer: opt.scale_loss(loss), then opt.apply(grads)",
     _has("keras.optimizers.LossScaleOptimizer.get_scaled_loss")),
    ("ModelCheckpoint('cp.ckpt', save_weights_only=True)",
     "a filepath ending in .weights.h5 with save_weights_only=True; .keras for a full model",
     _refused(lambda keras: keras.callbacks.ModelCheckpoint("cp.ckpt", save_weights_only=True))),
    ("model.fit(..., workers=4, use_multiprocessing=True)",
     "tf.data (notebook 03), or a keras.utils.PyDataset whose __init__ calls "
     "super().__init__(workers=4, use_multiprocessing=True)", _refused(_fit_with_workers)),
    ("TPUClusterResolver + TPUStrategy on a Colab or Kaggle TPU",
     "Keras 3 on JAX (notebook 09) or PyTorch/XLA (10); TPUStrategy only where TensorFlow reaches "
     "a TPU: a Cloud TPU VM with tensorflow-tpu",
     _installed("tensorflow-tpu", "no tensorflow-tpu: TensorFlow reaches no TPU here"))]


def migration_rows() -> list[list[str]]:
    """Rows of (seen in posts, use today, what this runtime says)."""
    return [[old, new, probe()] for old, new, probe in MIGRATIONS]


def check_parameters(*, accelerator, matmul_size, dataset, sample_images):
    """Notebook 01's parameters, checked before any work: one line names a wrong one."""
    return validate(
        accelerator=(accelerator, all_of(one_of("auto", "cpu", "gpu"), devices.accelerator_rule())),
        matmul_size=(matmul_size, integer(16, 16384)),
        dataset=(dataset, one_of(*data.DATASETS)),
        sample_images=(sample_images, integer(1, 64)))
