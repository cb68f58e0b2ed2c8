"""Small, standard models the course trains and times.

Used by: 02_gpu_vs_cpu_benchmark (and later notebooks that need a classifier).
"""

from __future__ import annotations


def mnist_cnn(input_shape=(28, 28, 1), classes: int = 10):
    """The classic Keras MNIST convnet: two convolutions, max-pool, dropout, two dense layers."""
    import keras
    from keras import layers

    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Rescaling(1 / 255),
            layers.Conv2D(32, 3, activation="relu"),
            layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Dropout(0.25),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.5),
            # softmax in float32 keeps mixed-precision outputs numerically safe
            layers.Dense(classes, activation="softmax", dtype="float32"),
        ],
        name="mnist_cnn",
    )


def cifar_cnn(input_shape=(32, 32, 3), classes: int = 10):
    """A small CIFAR-10 convnet: three conv blocks with batch norm, then a dense head."""
    import keras
    from keras import layers

    blocks = []
    for filters in (32, 64, 128):
        blocks += [
            layers.Conv2D(filters, 3, padding="same", use_bias=False),
            layers.BatchNormalization(),
            layers.Activation("relu"),
            layers.MaxPooling2D(),
        ]
    return keras.Sequential(
        [
            keras.Input(input_shape),
            layers.Rescaling(1 / 255),
            *blocks,
            layers.GlobalAveragePooling2D(),
            layers.Dense(128, activation="relu"),
            layers.Dense(classes, activation="softmax", dtype="float32"),
        ],
        name="cifar_cnn",
    )


MODELS = {"mnist_cnn": mnist_cnn, "cifar_cnn": cifar_cnn}
