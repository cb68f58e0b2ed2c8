"""Solutions to notebook 09's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `jax`, `keras` and `np` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 09.1: write a classifier's pure training step
def classifier_step(model, optimizer):
    """A jitted step(state, x, y) -> (new_state, loss); state = (trainable, non_trainable,
    optimizer variables), lists of values."""
    def loss_fn(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        losses = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        return keras.ops.mean(losses), non_trainable

    def step(state, x, y):
        trainable, non_trainable, optimizer_vars = state
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, non_trainable, x, y)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return (trainable, non_trainable, optimizer_vars), loss

    return jax.jit(step)


# Exercise 09.2: split a global batch between the devices
def split_batch(array, device_list):
    """`array` on `device_list`, its first axis split evenly between them."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(device_list), ("batch",))
    return jax.device_put(array, NamedSharding(mesh, PartitionSpec("batch")))
