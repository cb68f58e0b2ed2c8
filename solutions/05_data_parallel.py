"""Solutions to notebook 05's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `np` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 05.1: average the loss over the global batch
def replica_loss(per_example_losses, global_batch_size):
    """This replica's share of the loss: summed over every replica, the global batch's mean."""
    return np.sum(per_example_losses) / global_batch_size


# Exercise 05.2: give each input pipeline its share of the files
def pipeline_files(files, num_pipelines, pipeline_id):
    """The files that input pipeline `pipeline_id` of `num_pipelines` reads."""
    return files[pipeline_id::num_pipelines]
