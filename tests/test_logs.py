from helpers import logs


def test_native_log_level_is_set_but_user_choice_wins():
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    in_force = logs.quiet_native_logs(env)
    assert in_force["TF_CPP_MIN_LOG_LEVEL"] == "0"  # the user's setting is kept
    assert env["GRPC_VERBOSITY"] == "ERROR"


def test_native_noise_is_dropped_and_real_errors_kept():
    captured = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1795985152.145620    4126 port.cc:153] oneDNN custom operations are on.\n"
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild.\n"
        "E0000 00:00:1.0 12 cuda_dnn.cc:8] Unable to load cuDNN\n"
        "Traceback (most recent call last):\n"
    )
    kept = logs.drop_native_noise(captured)
    assert "oneDNN" not in kept and "absl::InitializeLog" not in kept and "AVX2" not in kept
    assert "Unable to load cuDNN" in kept and "Traceback" in kept


def test_import_tensorflow_returns_the_module(tf):
    assert logs.import_tensorflow() is tf
    assert tf.__version__.startswith("2.")


def test_no_helpers_module_imports_tensorflow_or_keras_on_import():
    """Notebooks import helpers first, then TensorFlow quietly (import_tensorflow): a helpers
    module that imported TensorFlow itself would print its start-up notices into the lesson."""
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, helpers\n"
        "for m in pkgutil.iter_modules(helpers.__path__):\n"
        "    importlib.import_module('helpers.' + m.name)\n"
        "    loaded = [n for n in ('tensorflow', 'keras') if n in sys.modules]\n"
        "    assert not loaded, (m.name, loaded)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
