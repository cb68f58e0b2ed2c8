"""DCGAN generators and discriminators: the TF tutorial's 28x28 pair and the classic
DCGAN for 32x32 or 64x64 images.

Batch norm runs TensorFlow's fused kernel and dropout draws half the random bits
(:mod:`helpers.layers`), except in the tutorial baseline. Under a mixed-precision policy
the generator's ``tanh`` output and the discriminator's logits stay float32, so losses are
computed in full precision.
"""

from __future__ import annotations

import math


def tutorial_generator(
    noise_dim: int = 100, channels: int = 1, synchronized: bool = False, tuned: bool = True
):
    """The TF DCGAN tutorial's generator: Dense 7x7x256, then 5x5 transposed convolutions.

    ``synchronized=True`` computes batch-norm statistics over the global batch under a
    distribution strategy (the same on 1 replica or 8); the default is per replica.
    ``tuned=False`` uses Keras's own batch norm, as the tutorial does (the baseline)."""
    import keras
    from keras import layers

    from helpers.layers import FusedBatchNormalization

    def norm():
        if not tuned:
            return layers.BatchNormalization(synchronized=synchronized)
        return FusedBatchNormalization(synchronized=synchronized)

    return keras.Sequential(
        [
            keras.Input((noise_dim,)),
            layers.Dense(7 * 7 * 256, use_bias=False),
            norm(),
            layers.LeakyReLU(0.3),
            layers.Reshape((7, 7, 256)),
            layers.Conv2DTranspose(128, 5, strides=1, padding="same", use_bias=False),
            norm(),
            layers.LeakyReLU(0.3),
            layers.Conv2DTranspose(64, 5, strides=2, padding="same", use_bias=False),
            norm(),
            layers.LeakyReLU(0.3),
            layers.Conv2DTranspose(channels, 5, strides=2, padding="same", use_bias=False),
            layers.Activation("tanh", dtype="float32"),
        ],
        name="tutorial_generator",
    )


def tutorial_discriminator(shape=(28, 28, 1), dropout: float = 0.3, tuned: bool = True):
    """The TF DCGAN tutorial's discriminator: two strided 5x5 convolutions, dropout, logits.

    ``dropout=0`` removes the randomness (dropout masks differ between replicas).
    ``tuned=False`` uses Keras's own dropout, as the tutorial does (the baseline); the
    default draws half as many random bits (:class:`helpers.layers.HalfWordDropout`)."""
    import keras
    from keras import layers

    from helpers.layers import HalfWordDropout

    drop = HalfWordDropout if tuned else layers.Dropout

    return keras.Sequential(
        [
            keras.Input(shape),
            layers.Conv2D(64, 5, strides=2, padding="same"),
            layers.LeakyReLU(0.3),
            drop(dropout),
            layers.Conv2D(128, 5, strides=2, padding="same"),
            layers.LeakyReLU(0.3),
            drop(dropout),
            layers.Flatten(),
            layers.Dense(1, dtype="float32"),
        ],
        name="tutorial_discriminator",
    )


def dcgan_generator(
    noise_dim: int = 100,
    size: int = 64,
    channels: int = 3,
    width: int = 64,
    synchronized: bool = False,
    fused: bool = True,
):
    """DCGAN generator (Radford et al.): 4x4 seed, stride-2 transposed 4x4 convolutions with
    batch norm and ReLU, ``tanh`` output; ``size`` is 32 or 64. ``fused=False``: Keras's own
    batch norm."""
    import keras
    from keras import layers

    from helpers.layers import FusedBatchNormalization

    norm = FusedBatchNormalization if fused else layers.BatchNormalization

    ups = int(math.log2(size // 4))
    filters = width * 2 ** (ups - 1)
    stack = [
        keras.Input((noise_dim,)),
        layers.Dense(4 * 4 * filters, use_bias=False),
        norm(synchronized=synchronized),
        layers.ReLU(),
        layers.Reshape((4, 4, filters)),
    ]
    for _ in range(ups - 1):
        filters //= 2
        stack += [
            layers.Conv2DTranspose(filters, 4, strides=2, padding="same", use_bias=False),
            norm(synchronized=synchronized),
            layers.ReLU(),
        ]
    stack += [
        layers.Conv2DTranspose(channels, 4, strides=2, padding="same", use_bias=False),
        layers.Activation("tanh", dtype="float32"),
    ]
    return keras.Sequential(stack, name=f"dcgan{size}_generator")


def dcgan_discriminator(
    shape=(64, 64, 3), width: int = 64, synchronized: bool = False, fused: bool = True
):
    """DCGAN discriminator: stride-2 4x4 convolutions with batch norm and LeakyReLU, logits.

    ``synchronized=True`` uses batch statistics across replicas under a distribution
    strategy (see notebook 05); ``fused=False``: Keras's own batch norm."""
    import keras
    from keras import layers

    from helpers.layers import FusedBatchNormalization

    norm = FusedBatchNormalization if fused else layers.BatchNormalization

    downs = int(math.log2(shape[0] // 4))
    stack = [keras.Input(shape)]
    filters = width
    for i in range(downs):
        stack.append(layers.Conv2D(filters, 4, strides=2, padding="same", use_bias=i == 0))
        if i:
            stack.append(norm(synchronized=synchronized))
        stack.append(layers.LeakyReLU(0.2))
        filters *= 2
    stack += [layers.Flatten(), layers.Dense(1, dtype="float32")]
    return keras.Sequential(stack, name=f"dcgan{shape[0]}_discriminator")


ARCHITECTURES = ("tutorial", "dcgan")


def build_pair(
    architecture: str,
    shape,
    noise_dim: int = 100,
    synchronized: bool = False,
    dropout: float = 0.3,
    fused_bn: bool = True,
    fast_dropout: bool = True,
):
    """Generator and discriminator for images of ``shape`` (28x28 for "tutorial",
    32x32 or 64x64 for "dcgan"); ``synchronized`` batch norm in both networks; ``dropout``
    in the tutorial's discriminator. ``fused_bn`` / ``fast_dropout`` False: Keras's own
    batch norm / dropout (the tutorial's, as 04's ablation measures)."""
    if architecture == "tutorial":
        if shape[:2] != (28, 28):
            raise ValueError(f"the tutorial DCGAN makes 28x28 images, not {shape[:2]}")
        return (
            tutorial_generator(noise_dim, shape[2], synchronized, tuned=fused_bn),
            tutorial_discriminator(shape, dropout, tuned=fast_dropout),
        )
    if architecture == "dcgan":
        if shape[0] != shape[1] or shape[0] not in (32, 64):
            raise ValueError(f"the DCGAN makes 32x32 or 64x64 images, not {shape[:2]}")
        return (
            dcgan_generator(
                noise_dim, shape[0], shape[2], synchronized=synchronized, fused=fused_bn
            ),
            dcgan_discriminator(shape, synchronized=synchronized, fused=fused_bn),
        )
    raise ValueError(f"architecture={architecture!r} is unknown: use one of {ARCHITECTURES}")
