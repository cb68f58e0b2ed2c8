"""Solutions to notebook 11's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `jax`, `keras` and `np` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 11.1: find the largest batch that fits a budget
def fit_batch(memory_of, budget):
    """The largest multiple of 8 with memory_of(batch) <= budget, else 0."""
    if memory_of(8) > budget:
        return 0
    low, high = 8, 16
    while memory_of(high) <= budget:
        low, high = high, 2 * high
    while high - low > 8:
        middle = (low + high) // 16 * 8
        low, high = (middle, high) if memory_of(middle) <= budget else (low, middle)
    return low


# Exercise 11.2: write a LayoutMap that splits the model's kernels
def split_kernels(mesh):
    """A LayoutMap splitting every `block...` Dense kernel's columns along "model"."""
    layout = keras.distribution.LayoutMap(mesh)
    layout[".*block.*kernel"] = (None, "model")
    return layout
