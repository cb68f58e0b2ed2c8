from helpers import runtime_check


def test_every_row_is_probed_against_this_tensorflow(tf):
    rows = runtime_check.migration_rows()
    assert len(rows) == len(runtime_check.MIGRATIONS)
    probed = {old: status for old, _, status in rows}
    assert probed["keras.utils.multi_gpu_model(model, gpus=N)"] == "gone"
    assert probed["tf.ConfigProto(gpu_options=...allow_growth=True)"] == "gone"
    assert probed["pip install tensorflow-gpu"].startswith("not installed")
    gpu_name = probed["tf.test.gpu_device_name() / tf.test.is_gpu_available()"]
    if tf.config.list_physical_devices("GPU"):  # the probe reports this machine's GPU
        assert gpu_name.startswith("gpu_device_name() returns '/device:GPU:0'")
        assert "no GPU" not in gpu_name
    else:
        assert gpu_name == "gpu_device_name() returns '' (no GPU: an empty string, easy to miss)"


def test_probe_sees_an_api_that_exists(tf):
    assert runtime_check._has("tf.config.list_physical_devices")() == "still present"
    assert runtime_check._has("tf.no_such_thing")() == "gone"


def test_keras3_checkpoint_names_and_fit_workers_are_probed_for_real(tf):
    """Both probes call Keras itself: on Keras 3 the old calls raise, and the row says how."""
    probed = {old: status for old, _, status in runtime_check.migration_rows()}
    checkpoint = probed["ModelCheckpoint('cp.ckpt', save_weights_only=True)"]
    assert checkpoint.startswith("raises ValueError:") and ".weights.h5" in checkpoint
    workers = probed["model.fit(..., workers=4, use_multiprocessing=True)"]
    assert workers.startswith("raises TypeError:") and "'workers'" in workers
