"""Quiet logs: TensorFlow's C++ start-up chatter (turned down at ``import helpers``, filtered by
:func:`native_noise_filtered`) and warnings learners can't act on (:func:`import_tensorflow`)."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
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
RUN_WITHOUT_TENSORFLOW: tuple[str, ...] = ("09_tpu_keras_jax", "10_tpu_pytorch_xla")


def no_tensorflow_message() -> str:
    """What a runtime without TensorFlow lacks, and what to do about it, in one line."""
    names = " or ".join(f"notebooks/{name}.ipynb" for name in RUN_WITHOUT_TENSORFLOW)
    return ("This runtime has no TensorFlow, which this notebook needs (Colab's TPU runtimes ship "
            "JAX, Keras and PyTorch/XLA instead): change the runtime type (Colab: Runtime > Change "
            f"runtime type > CPU or T4 GPU; Kaggle: Settings > Accelerator), or open {names}, "
            "which run here.")


_import_seconds: float | None = None  # how long import_tensorflow's import took, once


def tensorflow_import_seconds() -> float | None:
    """Seconds :func:`import_tensorflow` took here (None: something else imported TensorFlow)."""
    return _import_seconds


def import_tensorflow():
    """Import TensorFlow (and Keras) quietly and return it, or raise :class:`NoTensorFlowError`."""
    global _import_seconds
    quiet_native_logs()
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    started = time.perf_counter()
    try:
        if importlib.util.find_spec("tensorflow") is None:
            raise ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow")
        with native_noise_filtered():
            import keras  # noqa: F401  (loads its own native pieces now, quietly)
            import tensorflow as tf
        _import_seconds = time.perf_counter() - started
    except ModuleNotFoundError as error:
        if error.name != "tensorflow":
            raise
        errors.show_as_one_line()
        raise errors.NoTensorFlowError(no_tensorflow_message(), name="tensorflow") from None
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):  # absl ships with TensorFlow
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    for module in ("tensorflow", "keras", "google.protobuf", "jupyter_client"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    warnings.filterwarnings("ignore", category=FutureWarning, module="keras")
    return tf


#: The filter process behind :func:`native_noise_filtered`: passes on each line not noise at once,
#: the noise too if the block fails or the process dies in it. argv: pattern, block-end, ack fd.
_FILTER_CODE = r"""
import os, re, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise, marker, ack = re.compile(sys.argv[1].encode()), sys.argv[2].encode(), int(sys.argv[3])
buf, held = b"", []
HEADER = b"[native messages hidden while the call ran, shown because it failed:]\n"
while True:
    if buf and not select.select([0], [], [], 0.2)[0]:
        os.write(1, buf)  # a line without its end, and nothing more coming: pass it on
        buf = b""
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buf += chunk
    while buf:
        at, newline = buf.find(marker), buf.find(b"\n")
        if at != -1 and (newline == -1 or at < newline):
            end = buf.find(b"\n", at)
            if end == -1:
                break
            os.write(1, buf[:at])
            failed = buf[at + len(marker):end] == b"failed"
            buf = buf[end + 1:]
            if failed and held:
                os.write(1, HEADER + b"".join(held))
            held = []
            os.write(ack, b"k")
            continue
        if newline == -1:
            break
        line, buf = buf[:newline + 1], buf[newline + 1:]
        if noise.match(line):
            held.append(line)
        else:
            os.write(1, line)
if buf and not buf.endswith(b"\n"):
    buf += b"\n"
os.write(1, buf + (HEADER + b"".join(held) if held else b""))  # died inside a block: show it all
"""

#: ends a block in the filter's input (no NUL: it travels in argv)
_MARKER = f"\x1ffast-tf-course-native-filter-end-{os.getpid()}:"


class _NativeFilter:
    """One filter process per target of file descriptor 2, started on first use."""

    def __init__(self):
        self.lock, self.depth, self.process = threading.RLock(), 0, None
        self.write_fd = self.ack_fd = self.target = None  # target: fd 2's (st_dev, st_ino)

    def _ensure(self) -> bool:
        if os.name != "posix":
            return False
        try:
            info = os.fstat(2)
        except OSError:
            return False
        target = (info.st_dev, info.st_ino)
        if self.process is not None and self.process.poll() is None and self.target == target:
            return True
        self._stop()
        read_fd, write_fd = os.pipe()
        ack_read, ack_write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-c", _FILTER_CODE, NATIVE_NOISE.pattern, _MARKER,
                 str(ack_write)], stdin=read_fd, stdout=2, stderr=subprocess.DEVNULL,
                pass_fds=(ack_write,), start_new_session=True)
        except (OSError, ValueError):
            for fd in (read_fd, write_fd, ack_read, ack_write):
                os.close(fd)
            return False
        os.close(read_fd)  # the filter process holds these ends now
        os.close(ack_write)
        self.write_fd, self.ack_fd, self.target = write_fd, ack_read, target
        return True

    def _stop(self) -> None:
        if self.write_fd is not None:
            os.close(self.write_fd)
            os.close(self.ack_fd)
            self.write_fd = self.ack_fd = None
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None

    def end_block(self, failed: bool) -> None:
        """Tell the process the block ended, and wait until it has passed everything on."""
        with contextlib.suppress(OSError):  # the filter died: nothing to wait for
            os.write(self.write_fd, f"{_MARKER}{'failed' if failed else 'ok'}\n".encode())
            if select.select([self.ack_fd], [], [], 10)[0]:
                os.read(self.ack_fd, 1)


_FILTER = _NativeFilter()
atexit.register(_FILTER._stop)  # lets it pass on the last lines before the process ends


@contextlib.contextmanager
def native_noise_filtered():
    """Filter :data:`NATIVE_NOISE` from fd 2 in the block (``_FILTER_CODE``, or a file read at the
    end), showing it if the block raises or the process dies in it. Nested blocks share one."""
    with _FILTER.lock:
        outer = _FILTER.depth == 0
        _FILTER.depth += 1
    try:
        if not outer:
            yield
            return
        sys.stderr.flush()
        filtered = _FILTER._ensure()
        captured = None if filtered else tempfile.TemporaryFile(mode="w+b")
        saved = os.dup(2)
        os.dup2(_FILTER.write_fd if filtered else captured.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if filtered:
                _FILTER.end_block(failed)
            else:
                with captured:
                    captured.seek(0)
                    text = captured.read().decode(errors="replace")
                rest = text if failed else drop_native_noise(text)
                if rest.strip():
                    sys.stderr.write(rest)
    finally:
        with _FILTER.lock:
            _FILTER.depth -= 1

