import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import tfdata_pipelines

FAST = tfdata_pipelines.Latencies().scaled(0.1)


@pytest.fixture(scope="module")
def pipeline(tf):
    """Notebook 03's pipeline function, the one the benchmark compares."""
    from helpers.lessons.nb03 import latency_pipeline

    return latency_pipeline


def test_naive_pays_every_latency_in_sequence(pipeline):
    epoch, log = tfdata_pipelines.simulation(FAST, pipeline)
    epoch(), epoch()
    kinds = [kind for kind, _, _ in log.events]
    lat = FAST
    assert kinds.count("open") == 2 * lat.files
    assert kinds.count("read") == 2 * lat.files * lat.records_per_file
    assert kinds.count("train") == 2 * lat.files * lat.records_per_file // lat.batch_size
    assert len(log.epoch_ends) == 3 and log.epoch_ends[0] < log.epoch_ends[1] < log.epoch_ends[2]
    # nothing overlaps in the naive pipeline: each event starts after the previous one ended
    ordered = sorted(log.events, key=lambda event: event[1])
    assert all(b[1] >= a[2] for a, b in zip(ordered, ordered[1:], strict=False))


def test_each_optimisation_changes_what_it_should(pipeline):
    results = {r["variant"]: r for r in tfdata_pipelines.compare(FAST, pipeline, epochs=2)}
    naive = results["naive"]
    assert naive["speedups"] == [1.0]  # one round after the first: naive's over its own
    # cache: only the first epoch opens and reads; the second comes from memory
    cached_kinds = [k for k, _, _ in results["cache"]["log"].events]
    assert cached_kinds.count("read") == FAST.files * FAST.records_per_file
    assert cached_kinds.count("open") == FAST.files
    # vectorised: one map call per batch instead of per record
    vec = [k for k, _, _ in results["vectorised map"]["log"].events].count("map")
    assert vec == 2 * FAST.files * FAST.records_per_file // FAST.batch_size

    # parallel map: decoding runs while the next records are read (speed itself is the
    # benchmark's business); in the naive pipeline nothing overlaps
    def overlaps(events):
        maps = [(s, e) for k, s, e in events if k == "map"]
        reads = [(s, e) for k, s, e in events if k == "read"]
        return any(ms < re and rs < me for ms, me in maps for rs, re in reads)

    assert overlaps(results["parallel map"]["log"].events)
    assert not overlaps(naive["log"].events)
    # all combined: files opened in parallel, decoding overlaps reading, and the steady
    # epoch is only training steps (cached); how much faster that is, is the benchmark's
    combined = results["all combined"]["log"].events
    batches = FAST.files * FAST.records_per_file // FAST.batch_size
    counts = {k: [e[0] for e in combined].count(k) for k in ("open", "read", "map", "train")}
    assert counts == {
        "open": FAST.files,
        "read": FAST.files * FAST.records_per_file,
        "map": batches,
        "train": 2 * batches,
    }
    last_read = max(end for kind, _, end in combined if kind != "train")
    assert sum(1 for kind, start, _ in combined if kind == "train" and start >= last_read) >= (
        batches
    )


def test_overlap_is_visible_in_the_event_log(pipeline):
    # opens of 50 ms, and up to three runs: on a loaded machine AUTOTUNE can start the
    # interleave with one file at a time (seen once in make test); the naive pipeline's opens
    # never overlap (test_naive_pays_every_latency_in_sequence)
    slow_opens = dataclasses.replace(FAST, open_s=0.05)
    for _ in range(3):
        epoch, log = tfdata_pipelines.simulation(slow_opens, pipeline, interleave=True)
        for _ in range(2):
            epoch()
        opens = sorted((s, e) for k, s, e in log.events if k == "open")
        if any(b[0] < a[1] for a, b in zip(opens, opens[1:], strict=False)):  # parallel opens
            return
    pytest.fail(f"no two files were open at once in 3 runs: {opens}")


def test_variants_alternate_and_each_keeps_its_own_clock(pipeline):
    calls = []
    timed = tfdata_pipelines.alternately(  # 02's harness, without its untimed calls
        {"a": (lambda: calls.append("a"), lambda: None), "b": (lambda: calls.append("b"),
                                                                lambda: None)}, 2, warm=False)
    assert calls == ["a", "b"] * 3 and [len(t.samples_s) for t in timed.values()] == [2, 2]
    results = tfdata_pipelines.compare(
        FAST,
        pipeline,
        epochs=3,
        variants={"naive": {}, "all combined": {"prefetch": True, "cache": True}},
    )
    for r in results:  # the clock runs only in the variant's own epochs: no gap for the other's
        ends = r["log"].epoch_ends
        assert len(ends) == 4 and len(r["later_s"]) == 2
        own = np.cumsum([r["first_epoch_s"], *r["later_s"]])  # the other's epoch: ~0.1 s more
        assert ends[1:] == pytest.approx(own, abs=0.03)  # what a loaded machine adds between
        assert all(0 <= start < end <= ends[-1] + 1e-3 for _, start, end in r["log"].events)
    naive, combined = results
    assert combined["speedups"] == pytest.approx(  # round by round: naive's epoch over its own
        [n / c for n, c in zip(naive["later_s"], combined["later_s"], strict=True)])
    rows = tfdata_pipelines.table_rows(results)
    assert rows[0][0] == "naive" and rows[0][3:] == ["1.00x (1.00-1.00x)", "baseline"]
    assert rows[1][4] == "too few rounds (2) to tell: pass epochs >= 6"  # a verdict: 5 rounds
    assert tfdata_pipelines.median_range([0.001, 0.003, 0.002]) == "2 (1-3)"
    assert tfdata_pipelines.median_range([1.5, 1.2, 2.0], 2, 1, "x") == "1.50x (1.20-2.00x)"
    fig = tfdata_pipelines.plot_timelines(results)
    assert len(fig.axes) == 2
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(tfdata_pipelines.COLORS)


@pytest.mark.parametrize(("ratios", "level", "says"), [
    ([1.5, 1.6], 1.0, "too few rounds (2) to tell: pass epochs >= 6"),  # notebook 03.1: noise
    ([1.2, 1.3, 1.1, 1.4, 1.2], 1.0, "faster in every round"),
    ([0.8, 0.9, 0.7, 0.95, 0.9], 1.0, "slower in every round"),
    ([0.9, 1.3, 1.1, 1.4, 1.2], 1.0, "no clear difference (the rounds disagree, or come within "
     "3%)"),
    ([1.0, 1.02, 0.98, 1.03, 1.01], 1.08, "below it in every round"),  # prefetch's bound
    ([1.02, 1.05, 1.01, 1.07, 1.0], 1.08, "no clear difference (the rounds disagree, or come "
     "within 3%)"),  # below the bound in every round, but not by more than 3% in all
    ([1.04, 1.05, 1.036, 1.2, 1.1], 1.0, "faster in every round"),  # each over 3% as printed
    ([1.04, 1.05, 1.031, 1.2, 1.1], 1.0, "no clear difference (the rounds disagree, or come "
     "within 3%)"),  # 1.031 prints as 1.03: on the line, not over it
    ([0.9, 0.8, 0.966, 0.85, 0.9], 1.0, "no clear difference (the rounds disagree, or come "
     "within 3%)"),  # 0.966 prints as 0.97
    ([0.9, 0.8, 0.975, 0.85, 0.9], 1.0, "no clear difference (the rounds disagree, or come "
     "within 3%)"),  # one round 2.5% slower: noise's size, called neither way
])
def test_a_difference_is_called_where_5_rounds_or_more_agree_by_over_3pc(ratios, level, says):
    assert tfdata_pipelines.called(ratios, level, ("above it", "below it") if level > 1
                                   else ("faster", "slower")) == says


def test_most_at_once_counts_overlapping_spans_of_the_kinds_asked():
    log = SimpleNamespace(events=[("open", 0.0, 1.0), ("read", 0.5, 2.0), ("map", 0.6, 0.9),
                                  ("read", 2.0, 3.0), ("read", 2.5, 2.6)])
    assert tfdata_pipelines.most_at_once(log, ("open", "read")) == 2  # touching: not overlapping
    assert tfdata_pipelines.most_at_once(log, ("open", "read", "map")) == 3
    assert tfdata_pipelines.most_at_once(log, ("train",)) == 0
