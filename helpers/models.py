"""Every classifier the course trains and times, each ending in a float32 layer."""


def mnist_cnn(input_shape=(28, 28, 1), classes: int = 10):
    """The classic Keras MNIST convnet: two convolutions, max-pool, dropout, two dense layers."""
    import keras
    from keras import layers

    return keras.Sequential([
        keras.Input(input_shape), layers.Rescaling(1 / 255),
        layers.Conv2D(32, 3, activation="relu"), layers.Conv2D(64, 3, activation="relu"),
        layers.MaxPooling2D(), layers.Dropout(0.25), layers.Flatten(),
        layers.Dense(128, activation="relu"), layers.Dropout(0.5),
        layers.Dense(classes, activation="softmax", dtype="float32"),
    ], name="mnist_cnn")


def cifar_cnn(input_shape=(32, 32, 3), classes: int = 10):
    """A small CIFAR-10 convnet: three conv blocks with batch norm, then a dense head."""
    import keras
    from keras import layers

    stack = [keras.Input(input_shape), layers.Rescaling(1 / 255)]
    for filters in (32, 64, 128):
        stack += [layers.Conv2D(filters, 3, padding="same", use_bias=False),
                  layers.BatchNormalization(), layers.Activation("relu"), layers.MaxPooling2D()]
    stack += [layers.GlobalAveragePooling2D(), layers.Dense(128, activation="relu"),
              layers.Dense(classes, activation="softmax", dtype="float32")]
    return keras.Sequential(stack, name="cifar_cnn")


def replica_classifier(shape=(28, 28, 1), synchronized: bool = True):
    """A small CNN with batch norm (over all replicas if ``synchronized``) and float32 logits."""
    import keras
    from keras import layers

    stack = [keras.Input(shape), layers.Rescaling(1 / 255)]
    for filters in (16, 32):
        stack += [layers.Conv2D(filters, 3, padding="same", use_bias=False),
                  layers.BatchNormalization(synchronized=synchronized), layers.ReLU(),
                  layers.MaxPooling2D()]
    # float32 logits under a mixed policy; in float64 (the yardstick's reference step) float64
    logits = "float64" if keras.config.floatx() == "float64" else "float32"
    stack += [layers.Flatten(), layers.Dense(10, dtype=logits)]  # no dropout: replicas agree
    return keras.Sequential(stack, name="replica_classifier")


def scoring_classifier(shape, classes: int):
    """Small convnet whose ``features`` layer gives the embedding for the Fréchet distance."""
    import keras
    from keras import layers

    inputs = x = keras.Input(shape)
    for filters in (32, 64):
        x = layers.Conv2D(filters, 3, activation="relu", padding="same")(x)
        x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    features = layers.Dense(64, activation="relu", name="features")(x)
    outputs = layers.Dense(classes, activation="softmax", dtype="float32")(features)
    return keras.Model(inputs, outputs, name="scorer")


MODELS = {"mnist_cnn": mnist_cnn, "cifar_cnn": cifar_cnn}
