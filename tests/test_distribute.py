import subprocess
import sys
import textwrap

import pytest

from helpers import distribute
from helpers.params import ParameterError


def test_batch_rule_needs_a_multiple_of_the_replicas():
    rule = distribute.batch_rule(8)
    assert rule("global_batch_size", 64) == 64
    for bad in (100, 4, 0, True, "64"):
        with pytest.raises(ParameterError) as error:
            rule("global_batch_size", bad)
        assert str(error.value).startswith(f"Invalid parameter global_batch_size={bad!r}")
        assert "multiple of the 8 replicas" in str(error.value)


def test_tpu_batch_advice():
    assert "multiple of 128, as TPU cores like" in distribute.tpu_batch_advice("tpu", 1024, 8)
    assert "a global batch of 1024 or more" in distribute.tpu_batch_advice("cpu", 64, 8)


EIGHT_REPLICAS = textwrap.dedent("""
    import json
    import numpy as np
    from helpers.logs import import_tensorflow
    from helpers.strategy import split_cpu
    from helpers import data, distribute, gan
    tf = import_tensorflow()
    split_cpu(8)
    images = data.load("digits", verbose=False)
    x, y = images.x_train[:64], images.y_train[:64]
    strategies = {"one": distribute.mirrored(1), "eight": distribute.mirrored(8)}
    out = {}
    for synced in (True, False):
        results = distribute.classifier_step_results(strategies, x, y, synchronized=synced)
        out[f"classifier {synced}"] = distribute.largest_difference(results, "one")["eight"]
        real = gan.to_gan_range(x).numpy()
        noise = np.random.default_rng(0).standard_normal((64, 100)).astype("float32")
        config = gan.GANConfig(dropout=0.0, synchronized_bn=synced)
        results = distribute.gan_step_results(strategies, real, noise, config)
        out[f"gan {synced}"] = distribute.largest_difference(results, "one")["eight"]
    run = distribute.fit_classifier(strategies["eight"], x, y, 32, epochs=2,
                                    steps_per_execution=4)
    out["fit"] = {"replicas": run["replicas"], "spe": run["steps_per_execution"],
                  "note": run["note"]}
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def eight_replicas():
    done = subprocess.run(
        [sys.executable, "-c", EIGHT_REPLICAS], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
@pytest.mark.parametrize("model", ["classifier", "gan"])
def test_one_and_eight_replicas_make_the_same_update(eight_replicas, model):
    synced = eight_replicas[f"{model} True"]
    assert synced["loss"] < 1e-4 and synced["weights"] < 1e-4


@pytest.mark.heavy
@pytest.mark.parametrize("model", ["classifier", "gan"])
def test_per_replica_batch_norm_drifts(eight_replicas, model):
    synced, plain = eight_replicas[f"{model} True"], eight_replicas[f"{model} False"]
    assert plain["weights"] > 10 * max(synced["weights"], 1e-7)


@pytest.mark.heavy
def test_fit_under_eight_replicas_falls_back_from_steps_per_execution(eight_replicas):
    fit = eight_replicas["fit"]
    assert fit["replicas"] == 8 and fit["spe"] == 1 and "keras-team/keras#19246" in fit["note"]
