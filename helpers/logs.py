"""Quiet logs: TensorFlow's C++ start-up chatter, and warnings learners can't act on."""

import contextlib
import importlib.util
import logging
import os
import re
import subprocess
import sys
import threading
import warnings

from helpers import errors


def quiet_native_logs() -> None:
    """Hide TensorFlow's C++ INFO and WARNING logs before it loads (a user's own setting wins)."""
    for key, value in (("TF_CPP_MIN_LOG_LEVEL", "2"), ("GRPC_VERBOSITY", "ERROR"),
                       ("GLOG_minloglevel", "2")):
        os.environ.setdefault(key, value)


#: What TF's C++ runtime writes to fd 2 as it loads, before its log level applies (TF 2.21).
NATIVE_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IW]\d{4} [\d:. ]+\d+ \w+\.cc:\d+\]"
    r"|To enable the following instructions:"
    # float16 on a CPU without AVX-512: a notice, logged as an error (02 measures its cost)
    r"|E\d{4} [\d:. ]+\d+ util\.cc:\d+\] oneDNN supports DT_HALF only"
    # Grappler dropping one pass of its remapper (dcgan.choose_precision turns it off on such CPUs)
    r"|E\d{4} [\d:. ]+\d+ meta_optimizer\.cc:\d+\] remapper failed"
    r"|E\d{4} [\d:. ]+\d+ python_hooks\.cc:\d+\] Can't import tensorflow)")  # JAX's profiler


def drop_native_noise(text: str) -> str:
    """Remove TensorFlow's start-up notices from captured stderr; keep everything else."""
    return "".join(line for line in text.splitlines(True) if not NATIVE_NOISE.match(line))


#: The notebooks that run without TensorFlow; every other one's setup stops, pointing at these.
RUN_WITHOUT_TENSORFLOW: tuple[str, ...] = ("09_tpu_keras_jax", "10_tpu_pytorch_xla",
                                          "11_tpu_scale")


def no_tensorflow_message() -> str:
    """What a runtime without TensorFlow lacks, and what to do about it, in one line."""
    names = " or ".join(f"notebooks/{name}.ipynb" for name in RUN_WITHOUT_TENSORFLOW)
    return ("This runtime has no TensorFlow, which this notebook needs (Colab's TPU runtimes ship "
            "JAX, Keras and PyTorch/XLA instead): change the runtime type (Colab: Runtime > Change "
            f"runtime type > CPU or T4 GPU; Kaggle: Settings > Accelerator), or open {names}, "
            "which run here.")


def import_tensorflow():
    """Import TensorFlow (and Keras) quietly and return it, or raise :class:`NoTensorFlowError`."""
    quiet_native_logs()
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    try:
        if importlib.util.find_spec("tensorflow") is None:
            raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
        with native_noise_filtered():
            import keras  # noqa: F401  (loads its own native pieces now, quietly)
            import tensorflow as tf
    except ModuleNotFoundError as error:
        if error.name != "tensorflow":
            raise
        errors.show_as_one_line()
        raise errors.NoTensorFlowError(no_tensorflow_message(), name="tensorflow") from None
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    from absl import logging as absl_logging  # a dependency of TensorFlow

    absl_logging.set_verbosity(absl_logging.ERROR)
    for module in ("tensorflow", "keras", "google.protobuf", "jupyter_client"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    warnings.filterwarnings("ignore", category=FutureWarning, module="keras")
    return tf


#: One filter process per block: real lines passed on at once, the noise too if the block fails
_FILTER_CODE = r"""
import os, re, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise, marker = re.compile(sys.argv[1].encode()), sys.argv[2].encode()
buf, held, failed, ended = b"", [], True, False
while not ended:
    if buf and not select.select([0], [], [], 0.2)[0]:
        os.write(1, buf)  # a line without its end, and nothing more coming: pass it on
        buf = b""
    chunk = os.read(0, 65536)
    ended = not chunk  # the process died in the block: everything is shown
    *lines, buf = (buf + chunk).split(b"\n")
    for line in lines:
        if marker in line:  # the block's end, "ok" or "failed"
            before, _, status = line.partition(marker)
            os.write(1, before)
            failed, ended = status == b"failed", True
            break
        if noise.match(line):
            held.append(line + b"\n")
        else:
            os.write(1, line + b"\n")
if buf:
    os.write(1, buf + b"\n")
if failed and held:
    os.write(1, b"[native messages hidden while the call ran, shown because it failed:]\n")
    os.write(1, b"".join(held))
"""

#: ends a block in the filter's input (no NUL: it travels in argv)
_MARKER = f"\x1ffast-tf-course-native-filter-end-{os.getpid()}:"
_LOCK, _depth = threading.Lock(), 0  # blocks open in this process: only the outermost filters


def _start_filter():
    """A filter process printing to fd 2, and the write end of its input; (None, None) if none."""
    read_fd, write_fd = os.pipe()
    try:
        process = subprocess.Popen([sys.executable, "-I", "-c", _FILTER_CODE, NATIVE_NOISE.pattern,
                                    _MARKER], stdin=read_fd, stdout=2, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
    except (OSError, ValueError):
        os.close(write_fd)
        return None, None
    finally:
        os.close(read_fd)
    return process, write_fd


@contextlib.contextmanager
def native_noise_filtered():
    """Filter :data:`NATIVE_NOISE` from fd 2 in the block; all shown if it fails or none runs."""
    global _depth
    with _LOCK:
        outer, _depth = _depth == 0, _depth + 1
    try:
        sys.stderr.flush()
        process, write_fd = _start_filter() if outer else (None, None)
        if not process:  # a nested block (the outer one filters), or no filter process
            yield
            return
        saved = os.dup(2)
        os.dup2(write_fd, 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            with contextlib.suppress(OSError):  # the filter died: nothing to wait for
                os.write(write_fd, f"{_MARKER}{'failed' if failed else 'ok'}\n".encode())
            os.close(write_fd)
            with contextlib.suppress(subprocess.TimeoutExpired):  # until it passed all on
                process.wait(timeout=10)
    finally:
        with _LOCK:
            _depth -= 1
