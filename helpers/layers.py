"""Keras layers that do the same maths as Keras's own, faster on TensorFlow.

Keras 3's ``BatchNormalization`` is written with backend-neutral ops: on TensorFlow it
casts to float32, computes the moments, normalises and casts back, a dozen small ops and
their gradients. TensorFlow has one fused kernel for all of it (``FusedBatchNormV3``, which
oneDNN and cuDNN accelerate, and which takes bfloat16/float16 inputs with float32
statistics). :class:`FusedBatchNormalization` uses it and is otherwise Keras's layer: same
variables in the same order (so checkpoints are interchangeable), same momentum, epsilon and
moving statistics.

Keras's ``Dropout`` draws one 32-bit random word per element; on a CPU, dropout (drawing
and applying the masks) took about a tenth of the DCGAN step. :class:`HalfWordDropout` draws
one word per two elements.

Each made the DCGAN step about 5% faster on a 2-core CPU in bfloat16 (``make bench``
records the step as a whole, ``dcgan_vs_tutorial``).

Both choose by feature, not by version: where this runtime lacks what the faster path needs
(Keras on another backend than TensorFlow, a Keras without ``renorm`` or a ``SeedGenerator``
on its layers, ...), they compute as Keras's own layer does. :func:`describe` says which
path ran.
"""

from __future__ import annotations

LAZY = ("FusedBatchNormalization", "HalfWordDropout")
_CLASSES: dict = {}
FUSED = "TensorFlow's fused kernel (FusedBatchNormV3)"
HALF_WORD = "16 random bits per element"
KERAS_OWN = "Keras's own ops"
#: The paths our layers took when they were last traced: ``{"batch norm": {path, ...}, ...}``.
USED: dict[str, set[str]] = {"batch norm": set(), "dropout": set()}


def describe() -> str:
    """One line saying how our batch norm and dropout computed in this process, e.g.
    ``batch norm: TensorFlow's fused kernel (FusedBatchNormV3); dropout: 16 random bits per
    element``, or Keras's own ops and why."""
    return "; ".join(
        f"{kind}: {' and '.join(sorted(paths)) if paths else 'not run yet'}"
        for kind, paths in USED.items()
    )


def _keras_backend() -> str:
    import keras

    return keras.backend.backend()


def __getattr__(name: str):
    """The layer classes, defined on first use: importing this module does not import Keras
    (the notebooks import TensorFlow quietly, through :func:`helpers.logs.import_tensorflow`)."""
    if name not in LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _CLASSES:
        _CLASSES.update(_define())
    return _CLASSES[name]


def _define() -> dict:
    import keras

    @keras.saving.register_keras_serializable(package="helpers")
    class FusedBatchNormalization(keras.layers.BatchNormalization):
        """``keras.layers.BatchNormalization`` computed by ``FusedBatchNormV3``.

        Falls back to Keras's own computation where the fused kernel does not apply:
        synchronized (cross-replica) statistics, batch renormalization, a mask, a normalised
        axis other than the last, inputs that are not 2-D or 4-D, no ``center``/``scale``, and
        bfloat16 on a GPU (the combination this course cannot test)."""

        def _unfusable(self, inputs, mask=None) -> str:
            """Why the fused kernel does not apply here ("" when it does). Chosen by feature:
            settings a Keras release lacks (Keras 3.10 has no ``renorm``) count as off."""
            if _keras_backend() != "tensorflow":
                return f"Keras runs on {_keras_backend()}"
            import tensorflow as tf

            rank = len(inputs.shape)
            reasons = {
                "no FusedBatchNormV3 here": not hasattr(tf.raw_ops, "FusedBatchNormV3"),
                "synchronized statistics": getattr(self, "synchronized", False),
                "batch renormalization": getattr(self, "renorm", False),
                "a mask": mask is not None,
                "no center or scale": not (self.center and self.scale),
                "not 2-D or 4-D": rank not in (2, 4),
                "a normalised axis other than the last": self.axis not in (-1, rank - 1),
                "bfloat16 on a GPU": inputs.dtype == tf.bfloat16
                and bool(tf.config.list_logical_devices("GPU")),
            }
            return next((reason for reason, applies in reasons.items() if applies), "")

        def call(self, inputs, training=None, mask=None):
            if reason := self._unfusable(inputs, mask):
                USED["batch norm"].add(f"{KERAS_OWN} ({reason})")
                return super().call(inputs, training=training, mask=mask)
            USED["batch norm"].add(FUSED)
            import tensorflow as tf

            channels = inputs.shape[-1]
            x = inputs if len(inputs.shape) == 4 else tf.reshape(inputs, [-1, 1, 1, channels])
            if self.compute_dtype != x.dtype.name:
                x = tf.cast(x, self.compute_dtype)
            stats = dict(
                scale=tf.convert_to_tensor(self.gamma.value),  # float32 (autocast=False)
                offset=tf.convert_to_tensor(self.beta.value),
                epsilon=self.epsilon,
                data_format="NHWC",
                exponential_avg_factor=1.0,
            )
            if training and self.trainable:
                empty = tf.constant([], tf.float32)
                y, mean, variance, *_ = tf.raw_ops.FusedBatchNormV3(
                    x=x, mean=empty, variance=empty, is_training=True, **stats
                )
                # the kernel returns the unbiased variance; Keras averages the biased one
                n = tf.cast(tf.size(x) // channels, tf.float32)
                variance = variance * (n - 1.0) / tf.maximum(n, 1.0)
                momentum = self.momentum
                self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum))
                self.moving_variance.assign(
                    self.moving_variance * momentum + variance * (1.0 - momentum)
                )
            else:
                y, *_ = tf.raw_ops.FusedBatchNormV3(
                    x=x,
                    mean=tf.convert_to_tensor(self.moving_mean.value),
                    variance=tf.convert_to_tensor(self.moving_variance.value),
                    is_training=False,
                    **stats,
                )
            return y if len(inputs.shape) == 4 else tf.reshape(y, tf.shape(inputs))

    @keras.saving.register_keras_serializable(package="helpers")
    class HalfWordDropout(keras.layers.Dropout):
        """``keras.layers.Dropout`` that draws 16 random bits per element instead of 32.

        Keras draws one random float (32 bits of Philox output) per element; here each random
        32-bit word gives the masks of two elements (its low and high halves). The drop
        probability is ``round(rate * 65536) / 65536`` (0.300003 for 0.3), and kept values are
        scaled by its inverse, as Keras does. Seeds come from the layer's ``SeedGenerator``, as
        in Keras, so checkpoints and determinism work the same. A ``noise_shape`` falls back to
        Keras's own dropout."""

        def _keras_reason(self) -> str:
            """Why Keras's own dropout runs instead ("" when ours does), by feature."""
            threshold = round(self.rate * 65536)
            reasons = {
                f"Keras runs on {_keras_backend()}": _keras_backend() != "tensorflow",
                "this Keras's Dropout has no seed generator": not hasattr(self, "seed_generator"),
                "a noise_shape": self.noise_shape is not None,
                f"rate {self.rate}": not 0 < threshold < 65536,
            }
            return next((reason for reason, applies in reasons.items() if applies), "")

        def call(self, inputs, training=False):
            if not training:
                return super().call(inputs, training=training)
            if reason := self._keras_reason():
                USED["dropout"].add(f"{KERAS_OWN} ({reason})")
                return super().call(inputs, training=training)
            USED["dropout"].add(HALF_WORD)
            import tensorflow as tf

            threshold = round(self.rate * 65536)
            seed = self.seed_generator.next()
            if seed.dtype != tf.int32:  # as Keras does: stateless ops want int32 seeds under XLA
                seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
            size = tf.size(inputs)
            words = tf.random.stateless_uniform(
                [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
            )
            low = tf.bitwise.bitwise_and(words, tf.constant(0xFFFF, tf.uint32))
            high = tf.bitwise.right_shift(words, tf.constant(16, tf.uint32))
            halves = tf.concat([low, high], axis=0)[:size]
            keep = tf.reshape(halves >= tf.constant(threshold, tf.uint32), tf.shape(inputs))
            scale = tf.cast(65536 / (65536 - threshold), inputs.dtype)
            return tf.where(keep, inputs * scale, tf.zeros_like(inputs))

    return {"FusedBatchNormalization": FusedBatchNormalization, "HalfWordDropout": HalfWordDropout}
