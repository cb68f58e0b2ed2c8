"""Solutions to notebook 07's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 07.1: find the largest batch under a budget
def largest_batch(fits, limit):
    """The largest batch from 1 to limit for which fits(batch) is True (0 if none)."""
    if not fits(1):
        return 0
    good, bad = 1, None  # good fits; bad (once found) does not
    while bad is None and good < limit:
        candidate = min(2 * good, limit)
        good, bad = (candidate, None) if fits(candidate) else (good, candidate)
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good


estimator = models.MODELS[params.model_name](x.shape[1:])
tried = []  # the estimate stands in for the measured step: no child process, no OOM


def fits_by_estimate(batch):
    tried.append(batch)
    return estimate_mb(estimator, batch)["total"] <= params.budget_mb


found = largest_batch(fits_by_estimate, params.max_batch)
print(f"By the estimate, the largest batch up to max_batch={params.max_batch} within "
      f"{params.budget_mb} MiB is {found} ({len(tried)} tries); measured, the search above "
      f"found {search.largest_ok}.")
at_cap = [name for name, batch in (("the estimate's", found), ("the measured", search.largest_ok))
          if batch >= params.max_batch]
if at_cap:  # a search that stops at its bound never saw a batch fail
    print(f"{' and '.join(at_cap).capitalize()} search{'es' * (len(at_cap) > 1)} reached "
          f"max_batch={params.max_batch}, the cap, without a batch failing: larger batches may "
          "fit too (raise max_batch to find where each one ends).")


# Exercise 07.2: accumulate gradients over k micro-batches
def train_accumulated(model, optimizer, loss_fn, micro_batches, k):
    """One update per k micro-batches, with the mean of their gradients; returns the updates."""
    updates, total, seen = 0, None, 0
    for xs, ys in micro_batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        part = tape.gradient(loss, model.trainable_variables)
        total = part if total is None else [t + p for t, p in zip(total, part, strict=True)]
        seen += 1
        if seen == k:  # the mean of k micro-batch means is the mean over all their examples
            mean = [t / k for t in total]
            optimizer.apply_gradients(zip(mean, model.trainable_variables, strict=True))
            updates, total, seen = updates + 1, None, 0
    return updates


micro_batches = tf.data.Dataset.from_tensor_slices((xb, yb)).batch(params.micro_batch,
                                                                   drop_remainder=True)
k = max(1, len(xb) // params.micro_batch)  # one update per pass over the examples
before = float(loss_fn(yb, small(xb)))
made = train_accumulated(small, tf.keras.optimizers.SGD(0.1), loss_fn, micro_batches.repeat(3), k)
print(f"{made} updates of {k} micro-batches of {params.micro_batch}: loss on the {len(xb)} "
      f"examples {before:.4f} before, {float(loss_fn(yb, small(xb))):.4f} after")
