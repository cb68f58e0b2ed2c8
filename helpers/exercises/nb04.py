"""Checks for notebook 04's exercises (DCGAN)."""

import math

import numpy as np

from helpers.exercises import exercise, require
from helpers.exercises.nb02 import reads
from helpers.logs import native_noise_filtered


@exercise("04.1", "add loss scaling to a float16 step",
          where="`make_train_step` and `update` under \"The training step\", and `build_gan`",
          hint="Wrap the optimizer: `keras.optimizers.LossScaleOptimizer(optimizer)`. In the "
               "step, `scaled = optimizer.scale_loss(loss)` inside the `with tf.GradientTape()` "
               "block, `tape.gradient(scaled, model.trainable_variables)`, then "
               "`optimizer.apply(grads, model.trainable_variables)`, which unscales them.",
          right="Gradients too small for float16 survived the step, scaled up in the tape and "
                "back down in `apply`: the weights moved by the right amount.")
def float16_step(make_optimizer, step) -> str | None:
    import keras
    import tensorflow as tf

    # loss mean(prediction * tiny): its gradient, tiny * mean(x), underflows float16 (6e-8)
    tiny, inputs = 1e-8, [[1.0, 2.0, 3.0, 4.0]] * 8
    start = 2.0**-20  # every weight: exact in float16, and float32 keeps steps of 1e-13 from it

    def loss_fn(y, predictions):  # float32, and tiny
        return tf.reduce_mean(tf.cast(predictions, "float32") * y)

    for set_to in (None, 2.0**13, 2.0**17):  # unbuilt, then scales moved (skipped steps...)
        inner = keras.optimizers.SGD(learning_rate=1.0)  # plain SGD: the update is -gradient
        optimizer = make_optimizer(inner)
        require(optimizer)
        if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return (f"`float16_optimizer` returned a {type(optimizer).__name__}, not a "
                    "`LossScaleOptimizer`: its `scale_loss` leaves the loss as it is, so small "
                    "float16 gradients underflow to zero.")
        if optimizer.inner_optimizer is not inner:
            return ("`float16_optimizer` wrapped a new optimizer, not the one it was given: wrap "
                    "`optimizer` itself, so that its settings (learning rate...) are kept.")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(
            1, use_bias=False, kernel_initializer=keras.initializers.Constant(start),
            dtype="mixed_float16")])
        if set_to is not None:
            optimizer.build(model.trainable_variables)
            optimizer.dynamic_scale.assign(set_to)
        try:
            with native_noise_filtered():  # a CPU's notice on its first float16 kernel
                loss = step(model, optimizer, loss_fn, tf.constant(inputs),
                            tf.fill((len(inputs), 1), tiny))
        except ValueError as error:
            if "No gradients provided" not in str(error):
                raise
            return ("`tape.gradient` gave no gradients: compute the scaled loss inside the "
                    "`with tf.GradientTape()` block, so that the tape records it.")
        require(loss)
        scale = float(optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale)
        moved = start - model.trainable_variables[0].numpy().ravel()  # by -gradient (plain SGD)
        expected = tiny * np.mean(inputs, axis=0)
        ratio = float(np.median(moved / expected))
        if not np.allclose(moved, expected, rtol=0.02):
            if scale < 2.0**10:
                return (f"With a loss scale of {scale:g}, these float16 gradients still "
                        f"underflow (the weights moved by {ratio:.3g} times the right amount): "
                        "leave `initial_scale` at its default (32768).")
            if not np.any(moved):
                return ("The weights did not move: their float16 gradients underflowed to "
                        "zero. Take the gradients of `optimizer.scale_loss(loss)`, not of `loss`.")
            if math.isclose(ratio, scale, rel_tol=0.05):  # the scale: scaled gradients applied
                return (f"The weights moved by {ratio:.3g} times the right amount, the loss "
                        "scale: the gradients were never unscaled. Call `optimizer.apply`, "
                        "which unscales them; its `inner_optimizer`'s does not.")
            return (f"The weights moved by {ratio:.3g} times the right amount: `apply` unscales "
                    "by the optimizer's current scale, so pass it the gradients of "
                    "`optimizer.scale_loss(loss)`, unchanged.")
        unscaled = start * float(np.sum(inputs[0])) * tiny  # mean(prediction * y), before it
        if not math.isclose(float(loss), unscaled, rel_tol=0.02):
            return (f"It returned {float(loss):.3g}, {float(loss) / unscaled:.3g} times the "
                    "loss: that is the scaled loss, which only the tape needs. Return `loss` "
                    "itself.")
    return None


@exercise("04.2", "read the losses back in batches",
          where="`train` under \"Batches, and a loop that does not stall\" (its `read_back`)",
          hint="Append each step's result to `pending` without reading it; when `pending` "
               "holds `read_back` results, read them all (`float(loss)`) into `losses` and "
               "empty it; after the loop, read what is left.",
          right="The loop waited for the device once per `read_back` steps, and at the end, "
                "and still returned every step's loss in order.")
def run_steps(fn) -> str | None:
    import tensorflow as tf

    queued, waits = [], []  # a read waits once for every step queued so far

    def step(batch):  # a real tensor: any way of reading it counts
        queued.append(batch)
        return tf.constant(1.0 / len(queued))

    for steps, read_back in ((50, 20), (7, 3), (4, 1)):
        queued.clear(), waits.clear()
        with reads(lambda _: waits[-1:] == [len(queued)] or waits.append(len(queued)), fn):
            losses = fn(step, [None] * steps, read_back)
            require(losses)
            losses = list(losses)
        if len(losses) != steps:
            return (f"For {steps} steps it returned {len(losses)} losses: "
                    + ("the ones still pending after the loop were never read."
                       if len(losses) < steps else "some steps were read twice."))
        if any(v is None or v is Ellipsis or tf.is_tensor(v) for v in losses):
            return "It returned the results themselves: read each one back with `float()`."
        if not all(math.isclose(float(a), 1.0 / i, rel_tol=1e-6)
                   for i, a in enumerate(losses, start=1)):
            return "The losses it returned are not the steps' losses, in the steps' order."
        expected = sorted({*range(read_back, steps + 1, read_back), steps})
        if waits != expected:
            return (f"For {steps} steps with read_back={read_back} it waited for the device "
                    f"after steps {waits}, not {expected}: read back every `read_back` "
                    + ("steps, not each one." if len(waits) > len(expected) else
                       "steps, so that the loop shows its progress and the device does not "
                       "hold every result."))
    return None
