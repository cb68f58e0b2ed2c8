import json
import textwrap

import pytest

from helpers import data_parallel
from helpers.params import ParameterError


def test_batch_rule_needs_a_multiple_of_the_replicas():
    rule = data_parallel.batch_rule(8)
    assert rule("global_batch_size", 64) == 64
    for bad in (100, 4, 0, True, "64"):
        with pytest.raises(ParameterError) as error:
            rule("global_batch_size", bad)
        assert str(error.value).startswith(f"Invalid parameter global_batch_size={bad!r}")
        assert "multiple of the 8 replicas" in str(error.value)


def test_tpu_batch_advice():
    assert "multiple of 128, as TPU cores like" in data_parallel.tpu_batch_advice(1024, 8)
    assert "a global batch that is a multiple of 1024" in data_parallel.tpu_batch_advice(64, 8)


# Notebook 06's fit on GPUs: mixed_float16 under MirroredStrategy. Its 1-versus-N tables
# (the classifier's, and notebook 04's GAN step with synchronized and per-replica batch norm)
# are the notebook's own outputs, judged on its run (tests/test_notebooks.py, check_replicas).
EIGHT_REPLICAS = textwrap.dedent("""
    import json
    from helpers.logs import import_tensorflow
    from helpers.devices import mirrored, split_devices
    from helpers import data, data_parallel, models
    tf = import_tensorflow()
    import keras
    split_devices(8)
    images = data.load("digits", verbose=False)
    x, y = images.x_train[:64], images.y_train[:64]
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(cpus) == 8, cpus
    keras.mixed_precision.set_global_policy("mixed_float16")
    with mirrored(cpus).scope():
        model = data_parallel.compile_classifier(models.replica_classifier())
    keras.mixed_precision.set_global_policy("float32")
    fit = model.fit(data_parallel.in_memory_dataset(x, y, 64), epochs=1, verbose=0)
    print(json.dumps({"float16 fit": [type(model.optimizer).__name__, fit.history["loss"][-1]]}))
""")


@pytest.mark.heavy
def test_fit_under_the_strategy_scales_the_float16_loss(fresh_process):
    done = fresh_process(EIGHT_REPLICAS, timeout=600)
    assert done.returncode == 0, done.output[-3000:]
    out = json.loads([line for line in done.output.splitlines() if line.startswith("{")][-1])
    optimizer, loss = out["float16 fit"]  # what notebook 06's fit runs on GPUs
    assert optimizer == "LossScaleOptimizer" and 0 < loss < 10


def test_the_validation_cell_knows_the_replicas_before_the_strategy_exists():
    assert data_parallel.expected_replicas("auto", 8, gpus=0, tpu_usable=False) == 8
    assert data_parallel.expected_replicas("auto", 8, gpus=2, tpu_usable=False) == 2
    assert data_parallel.expected_replicas("cpu", 8, gpus=2, tpu_usable=False) == 8
    assert data_parallel.expected_replicas("auto", 8, gpus=0, tpu_usable=True) is None
    assert data_parallel.expected_replicas("auto", "eight", gpus=0, tpu_usable=False) == 1
    assert data_parallel.batch_rule(None)("global_batch_size", 99) == 99  # checked once connected
