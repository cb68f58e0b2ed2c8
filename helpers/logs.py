"""Quiet logs, so that a notebook's output is what the lesson shows.

TensorFlow prints start-up chatter from C++ (oneDNN notices, CPU feature
notices, CUDA factory registrations) and Python warnings that say nothing to a
learner.
"""

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
from helpers.errors import NoTensorFlowError

#: Environment variables read by TensorFlow's C++ runtime when it loads.
NATIVE_LOG_SETTINGS = {
    "TF_CPP_MIN_LOG_LEVEL": "2",  # hide INFO and WARNING, keep errors
    "GRPC_VERBOSITY": "ERROR",
    "GLOG_minloglevel": "2",
}


def quiet_native_logs(environ: dict | None = None) -> dict:
    """Turn TensorFlow's C++ logging down; takes effect if run before TF loads.

    Values the user already set are kept (``setdefault``), so
    ``TF_CPP_MIN_LOG_LEVEL=0`` still brings everything back. Returns what is in
    force. Called when :mod:`helpers` is imported.
    """
    env = os.environ if environ is None else environ
    for key, value in NATIVE_LOG_SETTINGS.items():
        env.setdefault(key, value)
    return {key: env[key] for key in NATIVE_LOG_SETTINGS}


#: Start-up lines TensorFlow's C++ runtime writes straight to file descriptor 2
#: while it loads, before its log level applies (seen with TF 2.21).
NATIVE_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\)"
    r"|[IW]\d{4} [\d:. ]+\d+ \w+\.cc:\d+\]"
    r"|To enable the following instructions:"
    # float16 on a CPU without AVX-512: TF says it uses Eigen instead of oneDNN (a notice,
    # though logged as an error); notebook 02 measures what that costs
    r"|E\d{4} [\d:. ]+\d+ util\.cc:\d+\] oneDNN supports DT_HALF only"
    # Grappler declining one rewrite of a graph (it runs the graph unrewritten)
    r"|E\d{4} [\d:. ]+\d+ meta_optimizer\.cc:\d+\] remapper failed)"
)


def drop_native_noise(text: str) -> str:
    """Remove TensorFlow's start-up notices from captured stderr; keep everything else."""
    kept = [line for line in text.splitlines(keepends=True) if not NATIVE_NOISE.match(line)]
    return "".join(kept)


#: Notebooks (stems) that run on a runtime without TensorFlow, such as Colab's TPU runtimes,
#: which ship JAX, Keras and PyTorch/XLA; every other notebook stops in its setup with one line
#: (:class:`NoTensorFlowError`) that points at these. tests/test_setup.py checks both.
RUN_WITHOUT_TENSORFLOW: tuple[str, ...] = ("08_tpu_keras_jax", "09_tpu_pytorch_xla")


def no_tensorflow_message(runs_here: tuple[str, ...] | None = None) -> str:
    """What a runtime without TensorFlow lacks, and what to do about it, in one line; it points
    at ``runs_here`` (default: :data:`RUN_WITHOUT_TENSORFLOW`)."""
    runs_here = RUN_WITHOUT_TENSORFLOW if runs_here is None else runs_here
    elsewhere = ""
    if runs_here:
        names = " or ".join(f"notebooks/{name}.ipynb" for name in runs_here)
        elsewhere = f", or open {names}, which run{'s' if len(runs_here) == 1 else ''} here"
    return (
        "This runtime has no TensorFlow, which this notebook needs (Colab's TPU runtimes ship "
        "JAX, Keras and PyTorch/XLA instead): change the runtime type (Colab: Runtime > Change "
        f"runtime type > CPU or T4 GPU; Kaggle: Settings > Accelerator){elsewhere}."
    )


_import_seconds: float | None = None  # how long import_tensorflow's import took, once


def tensorflow_import_seconds() -> float | None:
    """How long :func:`import_tensorflow` took to import TensorFlow and Keras in this process
    (what any new process pays again); None where something else imported them first."""
    return _import_seconds


def import_tensorflow():
    """Import TensorFlow with its start-up notices hidden; return the module.

    The oneDNN and CPU-feature notices are written by C++ before any log level
    applies, so they are filtered from the process's stderr during the import.
    Anything else written there (a real error) is passed on. Without TensorFlow
    it raises :class:`NoTensorFlowError`, which IPython shows as one line.
    """
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
        raise NoTensorFlowError(no_tensorflow_message(), name="tensorflow") from None
    quiet()
    return tf


#: The filter process behind :func:`native_noise_filtered`. It reads what native code writes
#: to file descriptor 2, passes on at once every line that is not known noise, keeps the
#: noise of the current block, and writes that too when the block fails or the process that
#: started it dies (then nobody else could). argv: noise pattern, block-end marker, ack fd.
_FILTER_CODE = r"""
import os, re, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
noise, marker, ack = re.compile(sys.argv[1].encode()), sys.argv[2].encode(), int(sys.argv[3])
buf, held = b"", []
HEADER = b"[native messages hidden while the call ran, shown because it failed:]\n"
def out(data):
    if data:
        os.write(1, data)
while True:
    if buf and not select.select([0], [], [], 0.2)[0]:
        out(buf)  # a line without its end, and nothing more coming: pass it on
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
            out(buf[:at])
            failed = buf[at + len(marker):end] == b"failed"
            buf = buf[end + 1:]
            if failed and held:
                out(HEADER + b"".join(held))
            held = []
            os.write(ack, b"k")
            continue
        if newline == -1:
            break
        line, buf = buf[:newline + 1], buf[newline + 1:]
        if noise.match(line):
            held.append(line)
        else:
            out(line)
if buf and not buf.endswith(b"\n"):
    buf += b"\n"
out(buf + (HEADER + b"".join(held) if held else b""))  # died inside a block: show it all
"""

#: ends a block in the filter's input (no NUL: it travels in argv)
_MARKER = f"\x1ffast-tf-course-native-filter-end-{os.getpid()}:"


class _NativeFilter:
    """One filter process per target of file descriptor 2, started on first use."""

    def __init__(self):
        self.lock = threading.RLock()
        self.depth = 0
        self.process = None
        self.write_fd = self.ack_fd = None
        self.target = None  # (st_dev, st_ino) of what fd 2 was when the process started

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
                [
                    sys.executable,
                    "-I",
                    "-c",
                    _FILTER_CODE,
                    NATIVE_NOISE.pattern,
                    _MARKER,
                    str(ack_write),
                ],
                stdin=read_fd,
                stdout=2,
                stderr=subprocess.DEVNULL,
                pass_fds=(ack_write,),
                start_new_session=True,
            )
        except (OSError, ValueError):
            for fd in (read_fd, write_fd, ack_read, ack_write):
                os.close(fd)
            self.process = None
            return False
        finally:
            if self.process is not None:
                os.close(read_fd)
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
        status = "failed" if failed else "ok"
        try:
            os.write(self.write_fd, f"{_MARKER}{status}\n".encode())
            ready, _, _ = select.select([self.ack_fd], [], [], 10)
            if ready:
                os.read(self.ack_fd, 1)
        except OSError:  # the filter died: nothing to wait for
            pass


_FILTER = _NativeFilter()
atexit.register(_FILTER._stop)  # lets it pass on the last lines before the process ends


@contextlib.contextmanager
def native_noise_filtered():
    """Filter TensorFlow's known native notices (:data:`NATIVE_NOISE`) from stderr.

    What native code writes to file descriptor 2 inside the block goes through a small
    filter process: every line that is not known noise is passed on at once, to where
    fd 2 pointed, so real errors show as they happen. If the block raises, the noise it
    hid is written too; if the process dies inside the block (a crash, the OOM killer),
    the filter process writes everything it still holds, so a crash is never swallowed.
    Where no process can be started, the block's output is captured in a file and passed
    on at the end (all of it when the block raised). Nested blocks share the outer one.
    """
    with _FILTER.lock:
        outer = _FILTER.depth == 0
        _FILTER.depth += 1
    try:
        if not outer:
            yield
            return
        sys.stderr.flush()
        if not _FILTER._ensure():
            with _captured_to_file():
                yield
            return
        saved = os.dup(2)
        os.dup2(_FILTER.write_fd, 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            _FILTER.end_block(failed)
    finally:
        with _FILTER.lock:
            _FILTER.depth -= 1


@contextlib.contextmanager
def _captured_to_file():
    """The fallback: fd 2 into a file, passed on at the end (filtered unless it raised)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            yield
            failed = False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            rest = text if failed else drop_native_noise(text)
            if rest.strip():
                sys.stderr.write(rest)


def quiet() -> None:
    """Quiet TensorFlow's Python-side loggers and the warnings learners can't act on.

    Call after ``import tensorflow``.
    """
    quiet_native_logs()
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:  # absl ships with TensorFlow; nothing to quiet without it
        pass
    for module in ("tensorflow", "keras", "google.protobuf", "jupyter_client"):
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
    warnings.filterwarnings("ignore", category=FutureWarning, module="keras")
