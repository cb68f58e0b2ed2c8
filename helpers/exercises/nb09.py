"""Checks for notebook 09's exercises (Keras 3 on JAX), run where the notebook runs."""

import random

import numpy as np

from helpers.exercises import exercise, keras_as_found, require


def _small_classifier(keras):  # logits, and batch norm: the step carries non-trainable state
    random.seed(1)  # what Keras's initializers draw from (set_random_seed imports TensorFlow)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.BatchNormalization(), keras.layers.Dense(3)])


@exercise("09.1", "write a classifier's pure training step",
          where="the cells under \"The DCGAN step, JAX style\" (`make_gan_step`)",
          hint="Inside a loss function of (trainable, non_trainable, x, y), run "
               "`model.stateless_call(trainable, non_trainable, x, training=True)`, which "
               "returns the logits and the new non-trainable values; average "
               "`sparse_categorical_crossentropy(y, logits, from_logits=True)` and return "
               "(loss, non_trainable). `jax.value_and_grad(..., has_aux=True)` gives both and "
               "the gradients; `optimizer.stateless_apply(opt_vars, grads, trainable)` gives "
               "the new trainable values and optimizer state. Wrap the step in `jax.jit`.",
          right="From the same weights, your step gives the loss, weights, batch-norm "
                "statistics and optimizer state that Keras's own train_on_batch gives.")
def classifier_step(fn) -> str | None:
    import keras

    if keras.backend.backend() != "jax":
        return "This check needs Keras on JAX (run the notebook from its first cell)."
    with keras_as_found(keras) as found:
        if found.name != "float32":  # the check's models compute in float32
            print(f"Keras's global dtype policy is {found.name!r} in this kernel (a cell or an "
                  "earlier attempt set it): the check ran in float32, then set it back.")
        keras.mixed_precision.set_global_policy("float32")
        rng = np.random.default_rng(8)
        x = rng.standard_normal((24, 6)).astype("float32")  # not 32, the batch size most typed
        y = rng.integers(0, 3, 24).astype("int32")
        theirs, ours = _small_classifier(keras), _small_classifier(keras)
        ours.compile(optimizer=keras.optimizers.Adam(0.01),
                     loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        # a sample weight given: under a distribution (notebook 09 sets one) Keras cannot place None
        want_loss = float(ours.train_on_batch(x, y, sample_weight=np.ones(len(y), "float32")))
        optimizer = keras.optimizers.Adam(0.01)  # Keras's step first: the answer may change Keras
        optimizer.build(theirs.trainable_variables)
        step = fn(theirs, optimizer)
        require(step)
        state = tuple([v.value for v in vs] for vs in (
            theirs.trainable_variables, theirs.non_trainable_variables, optimizer.variables))
        result = step(state, x, y)
        require(result)
        if not (isinstance(result, tuple | list) and len(result) == 2):
            return "The step must return two things: (new_state, loss)."
        new_state, loss = result
        if not (isinstance(new_state, tuple | list) and len(new_state) == 3):
            return "new_state must be (trainable, non_trainable, optimizer variables), like state."
        if not np.isclose(loss := float(np.asarray(loss)), want_loss, rtol=1e-4):
            return (f"Your loss is {loss:.5g}, Keras's {want_loss:.5g}: the mean sparse "
                    "categorical cross-entropy on logits (from_logits=True), before the update.")
        for name, got, want, advice in (
                ("trainable weights", new_state[0], ours.trainable_variables, "."),
                ("non-trainable values (batch norm's moving statistics)", new_state[1],
                 ours.non_trainable_variables, ": keep what stateless_call returns."),
                ("optimizer variables (its step count and moments)", new_state[2],
                 ours.optimizer.variables, ": return what stateless_apply returns.")):
            same = len(got) == len(want) and all(
                np.allclose(np.asarray(a), np.asarray(b.value), atol=1e-5)
                for a, b in zip(got, want, strict=True))
            if not same:
                return (f"The loss is right, but the new {name} are not Keras's after one "
                        f"step{advice}")
        return None


@exercise("09.2", "split a global batch between the devices",
          where="`make_gan_step`'s `split` and the `on_devices` function",
          hint="Make a `jax.sharding.Mesh(np.array(device_list), ('batch',))`, then "
               "`jax.device_put(array, NamedSharding(mesh, PartitionSpec('batch')))`: the "
               "first axis is split along the mesh's only axis, the others are whole.",
          right="The array's values are unchanged, and each device holds its own equal, "
                "non-overlapping share of the rows: what `fit` and `distribute_tensor` do.")
def split_batch(fn, devices=None) -> str | None:
    import jax

    devices = list(devices or jax.devices())
    lists = [devices, devices[:2], devices[:1]] if len(devices) > 2 else [devices]
    for device_list, rows, rest, dtype in zip(lists, (8, 4, 3), ((3,), (2, 5), ()),
                                              ("float32", "int32", "float32"), strict=False):
        n = len(device_list)  # values bfloat16 cannot hold, other ranks and dtypes
        array = (np.arange(rows * n * int(np.prod(rest))).reshape(-1, *rest) * 1.1).astype(dtype)
        result = fn(array, device_list)
        require(result)
        if not isinstance(result, jax.Array):
            return f"It returned a {type(result).__name__}, not a JAX array on the devices."
        if result.dtype != array.dtype or not np.array_equal(np.asarray(result), array):
            return (f"Its values or dtype ({result.dtype}; the array's: {dtype}) are not the "
                    "array's: place it, do not change or cast it.")
        if (where := {s.device for s in result.addressable_shards}) != set(device_list):
            return f"Given {n} device(s), it lives on {len(where)} device(s): put it on those."
        if (held := [len(np.asarray(s.data)) for s in result.addressable_shards]) != [rows] * n:
            return (f"With {n} devices, they hold {sorted(set(held))} rows each, not {rows} of the "
                    f"{rows * n}: split the first axis, do not copy the whole array to each.")
    return None
