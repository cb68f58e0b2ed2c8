"""Notebook 07's exercise checks: each passes its solution and says "not yet", with what is
wrong, to the untouched exercise and to the usual mistakes."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from solved import solution_functions

from helpers.exercises import check
from helpers.logs import import_tensorflow


@pytest.fixture(scope="module")
def solved():
    """The solutions learners are given, with the notebook's `tf`."""
    return solution_functions("07_out_of_memory", tf=import_tensorflow())


def verdict(exercise, answer):
    return check(exercise, answer)


# 07.1: find the largest batch under a budget


def bisecting(fits, limit, capped=True):
    if not fits(1):
        return 0
    good, bad = 1, None
    while bad is None and good < limit:
        candidate = min(2 * good, limit) if capped else 2 * good
        good, bad = (candidate, None) if fits(candidate) else (good, candidate)
    while bad is not None and bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good


def one_by_one(fits, limit):  # right answers, a trial per batch size
    batch = 0
    while batch < limit and fits(batch + 1):
        batch += 1
    return batch


def doubling_only(fits, limit):  # stops at the last power of 2 that fit
    if not fits(1):
        return 0
    batch = 1
    while batch * 2 <= limit and fits(batch * 2):
        batch *= 2
    return batch


def past_the_limit(fits, limit):  # doubles beyond limit, where everything fits
    return min(bisecting(fits, limit, capped=False), limit)


def plain_bisection(fits, limit):  # first tries limit / 2: an OOM where little fits
    good, bad = 0, limit + 1
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return good


def numpy_integers(fits, limit):  # right: NumPy's integers are integers
    return np.int64(bisecting(lambda b: fits(int(b)), int(np.int64(limit))))


def with_bisect_module(fits, limit):  # right: doubling, then the standard library's bisect
    if not fits(1):
        return 0
    good = 1
    while good < limit and fits(min(2 * good, limit)):
        good = min(2 * good, limit)
    if good == limit:
        return limit
    bad = min(2 * good, limit)  # the try that failed
    return good + bisect.bisect_left(range(good + 1, bad), True, key=lambda b: not fits(b))


def walks_up_from_the_last_doubling(fits, limit):  # previously accepted: 37 is 5 steps past 32
    if not fits(1):
        return 0
    batch = 1
    while batch < limit and fits(min(2 * batch, limit)):
        batch = min(2 * batch, limit)
    while batch < limit and fits(batch + 1):
        batch += 1
    return batch


def test_06_1_right(solved):
    result = verdict("07.1", solved["largest_batch"])
    assert result.passed, result.message


@pytest.mark.parametrize("answer", [bisecting, numpy_integers, with_bisect_module])
def test_06_1_right_written_otherwise(answer):
    assert verdict("07.1", answer).passed


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda fits, limit: None, "placeholder"),
    (one_by_one, "called `fits`"),
    (doubling_only, "the last doubling that fit"),
    (past_the_limit, "try only whole batch sizes from 1 to"),
    (lambda fits, limit: bisecting(fits, limit) or None, "return 0"),
    (plain_bisection, "plain bisection starts at limit / 2"),
    (walks_up_from_the_last_doubling, "batches up to 600 fit, limit 8192"),
])
def test_06_1_wrong(answer, expected):
    result = verdict("07.1", answer)
    assert not result.passed
    assert expected in result.message


# 07.2: accumulate gradients over k micro-batches


def accumulating(mean=True, reset=True, every=False):
    import tensorflow as tf

    def train(model, optimizer, loss_fn, micro_batches, k):
        updates, total, seen = 0, None, 0
        for xs, ys in micro_batches:
            with tf.GradientTape() as tape:
                loss = loss_fn(ys, model(xs, training=True))
            part = tape.gradient(loss, model.trainable_variables)
            total = part if total is None else [t + p for t, p in zip(total, part, strict=True)]
            seen += 1
            if every or seen % k == 0:
                grads = [t / k for t in total] if mean and not every else total
                optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
                updates += 1
                if reset:
                    total = None
        return updates

    return train


def test_06_2_right(solved):
    result = verdict("07.2", solved["train_accumulated"])
    assert result.passed, result.message


def with_variables(model, optimizer, loss_fn, micro_batches, k):
    """Right, written otherwise: sums kept in variables, as a tf.function would need."""
    import tensorflow as tf

    sums = [tf.Variable(tf.zeros_like(v), trainable=False) for v in model.trainable_variables]
    updates = 0
    for seen, (xs, ys) in enumerate(micro_batches, start=1):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True)) / k  # each part already divided
        for total, grad in zip(sums, tape.gradient(loss, model.trainable_variables), strict=True):
            total.assign_add(grad)
        if seen % k == 0:
            optimizer.apply_gradients(zip(sums, model.trainable_variables, strict=True))
            for total in sums:
                total.assign(tf.zeros_like(total))
            updates += 1
    return updates


def with_lists(model, optimizer, loss_fn, micro_batches, k):
    """Right, written otherwise: the k gradients kept, then averaged with tf.add_n."""
    import tensorflow as tf

    pending, updates = [], 0
    for xs, ys in micro_batches:
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        pending.append(tape.gradient(loss, model.trainable_variables))
        if len(pending) == k:
            mean = [tf.add_n(list(parts)) / k for parts in zip(*pending, strict=True)]
            optimizer.apply_gradients(zip(mean, model.trainable_variables, strict=True))
            pending, updates = [], updates + 1
    return updates


def scaled_loss_and_apply(model, optimizer, loss_fn, micro_batches, k):
    """Right, written otherwise: each loss divided by k, the gradients summed in a list of
    tensors, applied with Keras 3's `optimizer.apply`."""
    import tensorflow as tf

    sums, updates = None, 0
    for i, (xs, ys) in enumerate(micro_batches):
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True)) / k
        grads = tape.gradient(loss, model.trainable_variables)
        sums = grads if sums is None else [a + b for a, b in zip(sums, grads, strict=True)]
        if (i + 1) % k == 0:
            optimizer.apply(sums, model.trainable_variables)
            sums, updates = None, updates + 1
    return updates


def concatenated(model, optimizer, loss_fn, micro_batches, k):
    """Previously accepted: one gradient of the k micro-batches put back together (the same
    update, in the memory of the large batch)."""
    import tensorflow as tf

    updates = 0
    for xs, ys in micro_batches.batch(k):
        xs, ys = tf.reshape(xs, (-1, xs.shape[-1])), tf.reshape(ys, (-1,))
        with tf.GradientTape() as tape:
            loss = loss_fn(ys, model(xs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        updates += 1
    return updates


def its_own_k(model, optimizer, loss_fn, micro_batches, k):  # previously accepted: k was 4
    return accumulating()(model, optimizer, loss_fn, micro_batches, 4)


@pytest.mark.parametrize("answer", [with_variables, with_lists, scaled_loss_and_apply])
def test_06_2_right_written_otherwise(answer):
    result = verdict("07.2", answer)
    assert result.passed, result.message


@pytest.mark.parametrize(("answer", "expected"), [
    (lambda: (lambda model, optimizer, loss_fn, micro_batches, k: None), "placeholder"),
    (lambda: accumulating(mean=False), "k times too large"),
    (lambda: accumulating(every=True), "not one per micro-batch"),
    (lambda: accumulating(reset=False), "start a new sum"),
    (lambda: (lambda model, optimizer, loss_fn, micro_batches, k: 2), "did not change"),
    (lambda: concatenated, "one loss on 16 examples"),
    (lambda: its_own_k, "k=2"),
])
def test_06_2_wrong(answer, expected):
    result = verdict("07.2", answer())
    assert not result.passed
    assert expected in result.message


def test_06_2_says_when_only_the_count_is_wrong(solved):
    right = solved["train_accumulated"]
    result = verdict("07.2", lambda *args: right(*args) and 8)
    assert not result.passed
    assert "it made 2 updates" in result.message
