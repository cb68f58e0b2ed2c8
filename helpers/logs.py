"""Quiet logs, so that a notebook's output is what the lesson shows.

TensorFlow prints start-up chatter from C++ (oneDNN notices, CPU feature
notices, CUDA factory registrations) and Python warnings that say nothing to a
learner. Used by every notebook, in its Setup cell.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings

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
    force. Called when :mod:`helpers` is imported. Used by: every notebook.
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


#: Notebooks (stems) whose setup runs on a runtime without TensorFlow, such as Colab's TPU
#: runtimes, which ship JAX only; every other notebook stops in its setup with one line
#: (:class:`NoTensorFlowError`) that points at these. tests/test_setup.py checks both.
RUN_WITHOUT_TENSORFLOW: tuple[str, ...] = ()


class NoTensorFlowError(ImportError):
    """This runtime has no TensorFlow; shown in IPython as its one line."""


def no_tensorflow_message(runs_here: tuple[str, ...] | None = None) -> str:
    """What a runtime without TensorFlow lacks, and what to do about it, in one line; it points
    at ``runs_here`` (default: :data:`RUN_WITHOUT_TENSORFLOW`).
    Used by: every notebook (Setup, through :func:`import_tensorflow`)."""
    runs_here = RUN_WITHOUT_TENSORFLOW if runs_here is None else runs_here
    elsewhere = "".join(f" or open notebooks/{name}.ipynb, which runs here" for name in runs_here)
    return (
        "This runtime has no TensorFlow, which this notebook needs (Colab's TPU runtimes ship "
        "JAX only): change the runtime type (Colab: Runtime > Change runtime type > CPU or "
        f"T4 GPU; Kaggle: Settings > Accelerator){elsewhere}."
    )


def import_tensorflow():
    """Import TensorFlow with its start-up notices hidden; return the module.

    The oneDNN and CPU-feature notices are written by C++ before any log level
    applies, so they are filtered from the process's stderr during the import.
    Anything else written there (a real error) is passed on. Without TensorFlow
    it raises :class:`NoTensorFlowError`, which IPython shows as one line.
    Used by: every notebook (Setup).
    """
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
        from helpers.params import install_ipython_handler

        install_ipython_handler(NoTensorFlowError)
        raise NoTensorFlowError(no_tensorflow_message(), name="tensorflow") from None
    quiet()
    return tf


@contextlib.contextmanager
def native_noise_filtered():
    """Filter TensorFlow's known native notices (:data:`NATIVE_NOISE`) from stderr.

    What C++ writes to file descriptor 2 inside the block is captured; lines
    that are not known noise are written on afterwards, so real errors still
    show. Used by: every notebook (through :func:`import_tensorflow`), 02.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            rest = drop_native_noise(captured.read().decode(errors="replace"))
            if rest.strip():
                sys.stderr.write(rest)


def quiet() -> None:
    """Quiet TensorFlow's Python-side loggers and the warnings learners can't act on.

    Call after ``import tensorflow``. Used by: every notebook (Setup).
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
