"""Solutions to notebook 06's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 06.1: run the loss on every replica and reduce it
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    """The global batch's mean loss: each replica's share from `strategy.run`, summed."""
    def replica_share(batch):
        losses = per_example_loss(batch)
        return tf.nn.compute_average_loss(losses, global_batch_size=global_batch_size)

    per_replica = strategy.run(replica_share, args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


# Exercise 06.2: write the input function that shards by InputContext
def array_input_fn(x, y, global_batch):
    """For `distribute_datasets_from_function`: each pipeline's share of (x, y), batched."""
    def input_fn(context):
        batch = context.get_per_replica_batch_size(global_batch)
        examples = tf.data.Dataset.from_tensor_slices((x, y))
        examples = examples.shard(context.num_input_pipelines, context.input_pipeline_id)
        return examples.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return input_fn
