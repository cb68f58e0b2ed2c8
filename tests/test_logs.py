import os
import subprocess
import sys
import tempfile
import time

from helpers import logs


def test_native_log_level_is_set_but_user_choice_wins(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    logs.quiet_native_logs()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"  # the user's setting is kept
    assert os.environ["GRPC_VERBOSITY"] == "ERROR"


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
    module that imported TensorFlow itself would print its start-up notices into the lesson.
    A second call, TensorFlow imported already, returns the same module."""
    code = (
        "import importlib, pkgutil, sys, helpers\n"
        "for m in pkgutil.iter_modules(helpers.__path__):\n"
        "    if m.name == 'preload': continue  # the fork server's, quietly (processes)\n"
        "    importlib.import_module('helpers.' + m.name)\n"
        "    loaded = [n for n in ('tensorflow', 'keras') if n in sys.modules]\n"
        "    assert not loaded, (m.name, loaded)\n"
        "from helpers import logs\n"
        "first = logs.import_tensorflow()\n"
        "assert 'tensorflow' in sys.modules and logs.import_tensorflow() is first\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


NOISE = b"I0000 00:00:1795985152.145620    4126 port.cc:153] oneDNN custom operations are on.\n"

BLOCK = """
import os, sys, time
from helpers import logs
mode = sys.argv[1]
try:
    with logs.native_noise_filtered():
        os.write(2, NOISE)
        os.write(2, b"E0000 00:00:1.0 12 cuda_dnn.cc:8] a real error\\n")
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "die":
            os.write(2, b"F0000 00:00:1.0 12 gpu.cc:1] Check failed: out of memory")
            os.abort()
        if mode == "wait":  # stay inside the block until the real line has been passed on
            deadline = time.monotonic() + 30
            while b"a real error" not in open(sys.argv[2], "rb").read():
                assert time.monotonic() < deadline, "held back until the block ends"
                time.sleep(0.05)
except RuntimeError:
    sys.stderr.write("caught\\n")
sys.stderr.write("after the block\\n")
"""


def _run_block(mode, wait_for=()):
    """Run a block in a fresh process whose stderr is a file; return that file's text (after
    the filter process, which outlives a dead one, has written ``wait_for``)."""
    with tempfile.NamedTemporaryFile() as err:
        code = f"NOISE = {NOISE!r}\n{BLOCK}"
        done = subprocess.run([sys.executable, "-c", code, mode, err.name], stderr=err, timeout=120)
        deadline = time.monotonic() + 30
        while not all(w in open(err.name).read() for w in wait_for) and time.monotonic() < deadline:
            time.sleep(0.05)
        return done.returncode, open(err.name).read()


def test_a_block_drops_only_the_noise():
    code, err = _run_block("ok")
    assert code == 0 and "oneDNN" not in err
    assert err.index("a real error") < err.index("after the block")  # in order


def test_lines_that_are_not_noise_are_passed_on_while_the_block_runs():
    code, err = _run_block("wait")
    assert code == 0 and "a real error" in err and "oneDNN" not in err


def test_a_failing_block_shows_the_noise_it_hid():
    code, err = _run_block("raise")
    assert code == 0 and "a real error" in err and "oneDNN custom operations" in err
    assert err.index("shown because it failed") < err.index("caught")


def test_a_process_dying_in_a_block_loses_nothing():
    code, err = _run_block("die", wait_for=("out of memory", "oneDNN"))
    assert code != 0
    assert "Check failed: out of memory" in err and "a real error" in err
    assert "oneDNN custom operations" in err  # everything, since the block never ended


def test_nested_blocks_and_the_fallback_without_a_filter_process(monkeypatch, capfd):
    with logs.native_noise_filtered(), logs.native_noise_filtered():
        os.write(2, NOISE + b"kept\n")
    assert capfd.readouterr().err == "kept\n"
    monkeypatch.setattr(logs, "_start_filter", lambda: (None, None))
    with logs.native_noise_filtered():  # no filter process: everything passes on
        os.write(2, NOISE + b"kept too\n")
    assert capfd.readouterr().err == NOISE.decode() + "kept too\n"
    monkeypatch.undo()
    try:
        with logs.native_noise_filtered():
            os.write(2, NOISE)
            raise KeyError("x")
    except KeyError:
        pass
    assert "oneDNN" in capfd.readouterr().err  # a failing block passes everything on
