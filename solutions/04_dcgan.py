"""Solutions to notebook 04's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 04.1: add loss scaling to a float16 step
def float16_optimizer(optimizer):
    """`optimizer`, wrapped so that a float16 model's small gradients do not underflow."""
    return keras.optimizers.LossScaleOptimizer(optimizer)


def float16_step(model, optimizer, loss_fn, x, y):
    """One training step on (x, y), with `loss = loss_fn(y, model(x, training=True))`; returns
    the loss, unscaled."""
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        scaled = optimizer.scale_loss(loss)  # inside the tape, so that it is recorded
    grads = tape.gradient(scaled, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)  # unscales, skips inf/NaN
    return loss


# Exercise 04.2: read the losses back in batches
def run_steps(step_fn, batches, read_back=20):
    """Run `step_fn` on each batch; return every step's loss as a float, in order, waiting
    for the device only once every `read_back` steps (and at the end)."""
    losses, pending = [], []
    for batch in batches:
        pending.append(step_fn(batch))  # queued: nothing waits for it
        if len(pending) == read_back:
            losses += [float(loss) for loss in pending]  # one wait, for them all
            pending = []
    return losses + [float(loss) for loss in pending]
