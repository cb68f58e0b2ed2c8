import json
import textwrap
from types import SimpleNamespace

import pytest

from helpers import devices, scale_out_profile


def test_replica_counts_double_up_to_the_largest():
    assert scale_out_profile.replica_counts(8) == [1, 2, 4, 8]
    assert scale_out_profile.replica_counts(6) == [1, 2, 4, 6]
    assert scale_out_profile.replica_counts(1) == [1]


SWEEP = textwrap.dedent("""
    import json
    from helpers.logs import import_tensorflow
    from helpers import data, scale_out_profile
    tf = import_tensorflow()
    from helpers.lessons.nb08 import strategy_for, sweep  # notebook 08's
    devices = scale_out_profile.replica_devices(4)
    images = data.load("digits", verbose=False)
    # 4, or the GPUs there are
    counts = scale_out_profile.replica_counts(min(4, len(devices.names)))
    rows = sweep(lambda n: strategy_for(devices, n), counts, images.x_train[:512],
                         images.y_train[:512], 16, epochs=2)
    kinds = [type(strategy_for(devices, n)).__name__ for n in (1, counts[-1])]
    print(json.dumps({"rows": rows, "kind": devices.kind, "shared": devices.shared_hardware,
                      "kinds": kinds}))
""")


def last_json(output: str) -> str:
    """The last line of ``output`` that is a JSON object (what the child printed last)."""
    return [line for line in output.splitlines() if line.startswith("{")][-1]


@pytest.mark.heavy
def test_sweep_over_overlapping_device_sets_on_split_devices(tf, fresh_process):
    """Strategies over CPU:0-1 and CPU:0-3 (or logical GPUs) in one process: their all-reduces
    must not clash. Several real GPUs are used as they are."""
    gpus = len(tf.config.list_physical_devices("GPU"))
    done = fresh_process(SWEEP)
    assert done.returncode == 0, done.output[-2000:]
    out = json.loads(last_json(done.output))
    assert out["kind"] == ("gpu" if gpus else "cpu") and out["shared"] == (gpus <= 1)
    counts = scale_out_profile.replica_counts(4 if gpus <= 1 else min(4, gpus))
    assert out["kinds"] == ["OneDeviceStrategy", "MirroredStrategy"]
    rows = out["rows"]
    assert [r["replicas"] for r in rows] == counts
    assert [r["global_batch"] for r in rows] == [16 * c for c in counts]
    assert all(row["images_per_s"] > 0 for row in rows)


@pytest.mark.parametrize(("by_batch", "by_replicas", "shared", "expected"), [
    ([1.3, 1.2, 1.4, 1.25, 1.5], [0.84, 0.86, 0.9, 0.8, 0.85], True, "The larger batch: 1.30x "
     "(1.20-1.50x), faster in every round; the replicas: 0.85x (0.80-0.90x), slower in every "
     "round. These replicas are slices of one chip: they add no compute; any gain is only idle "
     "time overlapped, not what more chips buy."),
    ([1.3, 1.02, 1.4, 1.25, 1.5], [1.2, 0.9, 1.3, 1.2, 1.1], False, "The larger batch: 1.30x "
     "(1.02-1.50x), no clear difference (the rounds disagree, or come within 3%); the replicas: "
     "1.20x (0.90-1.30x), no clear difference (the rounds disagree, or come within 3%)."),
    ([1.5, 1.6], [0.7, 0.8], False, "The larger batch: 1.55x (1.50-1.60x), too few rounds (2) to "
     "tell: pass split_rounds >= 5; the replicas: 0.75x (0.70-0.80x), too few rounds (2) to "
     "tell: pass split_rounds >= 5."),
])
def test_the_split_is_read_round_by_round(by_batch, by_replicas, shared, expected):
    """Each factor, one ratio a round, by notebook 02's rule: 5 rounds, each over 3% one way."""
    assert scale_out_profile.read_split(by_batch, by_replicas, shared) == expected


def test_one_gpu_is_split_into_logical_gpus_that_fit_in_its_memory(tf, monkeypatch):
    configured = []
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["gpu0"])
    monkeypatch.setattr(
        tf.config, "set_logical_device_configuration", lambda d, cfg: configured.extend(cfg)
    )
    monkeypatch.setattr(
        tf.config,
        "list_logical_devices",
        lambda kind=None: [SimpleNamespace(name=f"/GPU:{i}") for i in range(len(configured))],
    )
    monkeypatch.setattr(devices, "list_gpus", lambda: [devices.GPU(0, "T4", "7.5", 15360)])
    split = scale_out_profile.replica_devices(8)
    assert split.kind == "gpu" and split.shared_hardware and len(split.names) == 8
    assert {c.memory_limit for c in configured} == {1536}  # 80% of 15360 MiB over 8
    assert split.description == "GPU split into 8 logical GPUs of 1536 MB"


def test_several_gpus_are_used_as_they_are_with_memory_growth(tf, monkeypatch):
    grown = []
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["gpu0", "gpu1"])
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda d, on: grown.append(d))
    monkeypatch.setattr(
        tf.config,
        "list_logical_devices",
        lambda kind=None: [SimpleNamespace(name=f"/GPU:{i}") for i in range(2)],
    )
    devices = scale_out_profile.replica_devices(8)
    assert devices.names == ["/GPU:0", "/GPU:1"] and not devices.shared_hardware
    assert grown == ["gpu0", "gpu1"] and devices.description == "2 GPUs"


def test_the_plot_shows_the_sweep_and_each_run_of_the_rounds():
    """The sweep as a line; each configuration timed in turns as points at its replica count."""
    sweep = [(1, 100), (2, 150)]  # (replicas, images/s)
    rows = [{"replicas": r, "global_batch": 16 * r, "images_per_s": v} for r, v in sweep]
    points = {"first run": (1, [100, 110]), "the batch alone": (1, [120, 130]),
              "2 replicas": (2, [160, 140])}
    lines = scale_out_profile.plot(rows, points, "a test").axes[0].lines
    assert list(lines[0].get_ydata()) == [100, 150]  # the sweep
    assert list(lines[1].get_ydata()) == [100, 200]  # perfect scaling from the first
    assert [list(line.get_xdata()) for line in lines[2:]] == [[1, 1], [1, 1], [2, 2]]
    assert [list(line.get_ydata()) for line in lines[2:]] == [[100, 110], [120, 130], [160, 140]]
    assert [line.get_label() for line in lines[2:]] == list(points)
