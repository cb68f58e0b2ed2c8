"""Notebook 04's exercise checks: each says "right" to its solution (the block in
solutions/04_dcgan.py, run as the notebook would) and "not yet", with the expected reason,
to the untouched exercise and to the usual mistakes."""

import numpy as np
import pytest
from solved import solution_functions

from helpers.exercises import check

UNTOUCHED = "still holds its placeholder"


@pytest.fixture(scope="module")
def solved(tf):
    """The names the solutions define, with the notebook's `tf` and `keras`."""
    import keras

    return solution_functions("04_dcgan", tf=tf, keras=keras)


def untouched(*args, **kwargs):
    """An exercise function whose body is still `...`."""


# 04.1: loss scaling


def test_loss_scaling_solution_is_right(solved):
    verdict = check("04.1", solved["float16_optimizer"], solved["float16_step"])
    assert verdict.passed, verdict.message


def test_loss_scaling_untouched_is_not_done(solved):
    assert UNTOUCHED in check("04.1", untouched, untouched).message
    verdict = check("04.1", solved["float16_optimizer"], untouched)  # the step still `...`
    assert not verdict.passed and UNTOUCHED in verdict.message


def test_loss_scaling_needs_the_wrapper(solved):
    verdict = check("04.1", lambda optimizer: optimizer, solved["float16_step"])
    assert not verdict.passed and "not a `LossScaleOptimizer`" in verdict.message


def test_loss_scaling_wraps_the_given_optimizer(solved):
    import keras

    def new_adam(optimizer):
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())

    verdict = check("04.1", new_adam, solved["float16_step"])
    assert not verdict.passed and "not the one it was given" in verdict.message


def _step(tf, scale_inside=True, scale=True, unscale_again=False):
    def step(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            if scale and scale_inside:
                scaled = optimizer.scale_loss(loss)
        if scale and not scale_inside:
            scaled = optimizer.scale_loss(loss)  # not recorded by the tape
        grads = tape.gradient(scaled if scale else loss, model.trainable_variables)
        if unscale_again:  # `apply` unscales too: twice in all
            grads = [g / optimizer.scale_loss(1.0) for g in grads]
        optimizer.apply(grads, model.trainable_variables)
        return loss

    return step


def test_loss_scaling_catches_an_unscaled_loss(tf, solved):
    verdict = check("04.1", solved["float16_optimizer"], _step(tf, scale=False))
    assert not verdict.passed and "underflowed to zero" in verdict.message


def test_loss_scaling_catches_scaling_outside_the_tape(tf, solved):
    verdict = check("04.1", solved["float16_optimizer"], _step(tf, scale_inside=False))
    assert not verdict.passed and "inside the" in verdict.message


def test_loss_scaling_catches_unscaling_twice(tf, solved):
    verdict = check("04.1", solved["float16_optimizer"], _step(tf, unscale_again=True))
    assert not verdict.passed and "times the right amount" in verdict.message


def test_loss_scaling_catches_the_scaled_loss_returned(tf, solved):
    def returns_scaled(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = optimizer.scale_loss(loss_fn(y, model(x, training=True)))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss  # the scaled one

    verdict = check("04.1", solved["float16_optimizer"], returns_scaled)
    assert not verdict.passed and "that is the scaled loss" in verdict.message


def test_loss_scaling_the_inner_optimizers_apply_is_named(tf, solved):
    def inner_apply(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.inner_optimizer.apply(grads, model.trainable_variables)  # never unscaled
        return loss

    verdict = check("04.1", solved["float16_optimizer"], inner_apply)
    assert not verdict.passed and "never unscaled" in verdict.message
    assert "`optimizer.apply`" in verdict.message


def test_loss_scaling_right_written_otherwise(tf):
    import keras

    def wrap(optimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=2.0**12)

    def step(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = loss_fn(y, predictions)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    verdict = check("04.1", wrap, step)
    assert verdict.passed, verdict.message


def test_loss_scaling_right_with_dynamic_growth_and_a_float_return(tf):
    import keras

    def wrap(optimizer):  # the scale grows every 1000 good steps (Keras's default is 2000)
        return keras.optimizers.LossScaleOptimizer(optimizer, dynamic_growth_steps=1000)

    def step(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(scaled, variables), variables)
        return float(loss)

    verdict = check("04.1", wrap, step)
    assert verdict.passed, verdict.message


def test_loss_scaling_catches_a_fixed_scale_of_its_own(tf, solved):
    """Previously accepted: 32768 is the scale a new LossScaleOptimizer starts at; the check now
    hands over one whose scale has changed since, as it does after an overflow."""
    def own_scale(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = loss * 32768.0
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    verdict = check("04.1", solved["float16_optimizer"], own_scale)
    assert not verdict.passed and "4 times the right amount" in verdict.message


def test_loss_scaling_right_as_a_tf_function(tf):
    import keras

    def wrap(optimizer):
        return keras.optimizers.LossScaleOptimizer(inner_optimizer=optimizer)

    @tf.function
    def step(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = optimizer.scale_loss(loss)
        optimizer.apply(tape.gradient(scaled, model.trainable_weights), model.trainable_weights)
        return loss

    verdict = check("04.1", wrap, step)
    assert verdict.passed, verdict.message


# 04.2: read back in batches


def test_read_back_solution_is_right(solved):
    verdict = check("04.2", solved["run_steps"])
    assert verdict.passed, verdict.message


def test_read_back_untouched_is_not_done():
    assert UNTOUCHED in check("04.2", untouched).message


def test_read_back_catches_a_read_every_step():
    def every_step(step_fn, batches, read_back=20):
        return [float(step_fn(batch)) for batch in batches]

    verdict = check("04.2", every_step)
    assert not verdict.passed and "not each one" in verdict.message


def test_read_back_catches_the_forgotten_last_steps():
    def drops_the_rest(step_fn, batches, read_back=20):
        losses, pending = [], []
        for batch in batches:
            pending.append(step_fn(batch))
            if len(pending) == read_back:
                losses += [float(loss) for loss in pending]
                pending = []
        return losses

    verdict = check("04.2", drops_the_rest)
    assert not verdict.passed and "never read" in verdict.message


def test_read_back_catches_one_read_at_the_end():
    def at_the_end(step_fn, batches, read_back=20):
        return [float(loss) for loss in [step_fn(batch) for batch in batches]]

    verdict = check("04.2", at_the_end)
    assert not verdict.passed and "shows its progress" in verdict.message


def test_read_back_catches_unread_results():
    def unread(step_fn, batches, read_back=20):
        return [step_fn(batch) for batch in batches]

    verdict = check("04.2", unread)
    assert not verdict.passed and "read each one back" in verdict.message


def _stacked(tf):
    def run_steps(step_fn, batches, read_back=20):
        losses, pending = [], []
        for batch in batches:
            pending.append(step_fn(batch))
            if len(pending) == read_back:
                losses += tf.stack(pending).numpy().tolist()  # one wait for them all
                pending = []
        if pending:
            losses += tf.stack(pending).numpy().tolist()
        return losses

    return run_steps


def test_read_back_with_tf_stack_is_right(tf):
    """The stand-in results convert to tensors as real ones do: stacking the pending ones and
    reading the stack once is one wait per read_back steps."""
    verdict = check("04.2", _stacked(tf))
    assert verdict.passed, verdict.message


def test_read_back_with_numpy_is_right():
    def run_steps(step_fn, batches, read_back=20):
        losses, pending = [], []
        for batch in batches:
            pending.append(step_fn(batch))
            if len(pending) == read_back:
                losses.extend(np.array(pending, dtype="float32").tolist())
                pending.clear()
        return losses + np.array(pending, dtype="float32").tolist()

    verdict = check("04.2", run_steps)
    assert verdict.passed, verdict.message


def test_read_back_catches_every_step_run_before_any_read():
    def run_steps(step_fn, batches, read_back=20):  # chunks of results, read after the loop
        results = [step_fn(batch) for batch in batches]
        chunks = [results[i:i + read_back] for i in range(0, len(results), read_back)]
        return [float(v) for chunk in chunks for v in np.array(chunk, dtype="float32")]

    verdict = check("04.2", run_steps)
    assert not verdict.passed and "waited for the device after steps [50]" in verdict.message


def test_read_back_with_convert_to_tensor_is_right(tf):
    """Previously rejected: the stand-in results did not convert as a list, real tensors do."""
    def run_steps(step_fn, batches, read_back=20):
        losses, pending = [], []
        for i, batch in enumerate(batches, start=1):
            pending.append(step_fn(batch))
            if i % read_back == 0 or i == len(batches):
                losses.extend(tf.convert_to_tensor(pending).numpy().tolist())
                pending = []
        return losses

    verdict = check("04.2", run_steps)
    assert verdict.passed, verdict.message


def test_read_back_with_item_is_right():
    def run_steps(step_fn, batches, read_back=20):
        losses, pending = [], []
        for batch in batches:
            pending.append(step_fn(batch))
            if len(pending) >= read_back:
                losses.extend(loss.numpy().item() for loss in pending)
                del pending[:]
        losses.extend(loss.numpy().item() for loss in pending)
        return losses

    verdict = check("04.2", run_steps)
    assert verdict.passed, verdict.message


def test_read_back_catches_np_asarray_every_step():  # a read too, though no float() is seen
    def run_steps(step_fn, batches, read_back=20):
        losses = []
        for batch in batches:
            losses.append(float(np.asarray(step_fn(batch))))
        return losses

    verdict = check("04.2", run_steps)
    assert not verdict.passed and "not each one" in verdict.message


def test_read_back_catches_its_own_read_back():
    def run_steps(step_fn, batches, read_back=20):
        losses, pending = [], []
        for batch in batches:
            pending.append(step_fn(batch))
            if len(pending) == 20:  # the default, whatever was asked
                losses += [float(loss) for loss in pending]
                pending = []
        return losses + [float(loss) for loss in pending]

    verdict = check("04.2", run_steps)
    assert not verdict.passed and "with read_back=3" in verdict.message


# 04.1, issue 50: the check varies the loss scale, and starts with a new, unbuilt optimizer


def _scaled_by(tf, scale_of):
    def step(model, optimizer, loss_fn, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = loss * scale_of(optimizer)
        optimizer.apply(tape.gradient(scaled, model.trainable_variables), model.trainable_variables)
        return loss

    return step


@pytest.mark.parametrize("initial_scale", [1.0, 8.0, 16.0])
def test_loss_scaling_catches_a_scale_too_small(tf, solved, initial_scale):
    """Previously accepted: the check set the scale itself, whatever the answer asked for."""
    import keras

    def wrap(optimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=initial_scale)

    verdict = check("04.1", wrap, solved["float16_step"])
    assert not verdict.passed and f"With a loss scale of {initial_scale:g}," in verdict.message
    assert "leave `initial_scale` at its default" in verdict.message


@pytest.mark.parametrize(("scale_of", "says"), [
    (lambda optimizer: optimizer.dynamic_scale, "AttributeError"),  # no such thing, unbuilt
    (lambda optimizer: 2.0**13, "0.25 times the right amount"),  # the check's old scale
    (lambda optimizer: 2.0**17, "4 times the right amount"),
    (lambda optimizer: optimizer.initial_scale, "4 times the right amount"),  # 32768, not 8192
])
def test_loss_scaling_catches_a_scale_of_its_own(tf, solved, scale_of, says):
    """Previously accepted (all but the last): one scale, set after `build`, in every check."""
    verdict = check("04.1", solved["float16_optimizer"], _scaled_by(tf, scale_of))
    assert not verdict.passed and says in verdict.message


def test_loss_scaling_right_with_the_scale_read_by_hand(tf, solved):
    def current(optimizer):  # what `scale_loss` does
        return optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale

    verdict = check("04.1", solved["float16_optimizer"], _scaled_by(tf, current))
    assert verdict.passed, verdict.message


# 04.2, issue 50: NumPy's functions bound atop the learner's cell, before the check ran
BOUND_FIRST = """
from numpy import array, asarray
from numpy import asarray as read


def each_with_asarray(step_fn, batches, read_back=20):
    return [float(asarray(step_fn(batch))) for batch in batches]


def each_with_array(step_fn, batches, read_back=20):
    return [array(step_fn(batch)).item() for batch in batches]


def each_as_read(step_fn, batches, read_back=20):  # every step, under a name of its own
    losses = []
    for batch in batches:
        losses.extend(read([step_fn(batch)]).tolist())
    return losses
"""


@pytest.mark.parametrize("name", ["each_with_asarray", "each_with_array", "each_as_read"])
def test_read_back_numpy_bound_before_the_check_is_still_seen(name):
    cell = {}
    exec(BOUND_FIRST, cell)
    got = check("04.2", cell[name])
    assert not got.passed and "not each one" in got.message, got.message
    assert cell["asarray"] is cell["read"] is np.asarray, "the cell's names, put back"
