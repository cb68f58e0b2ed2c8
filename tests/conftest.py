"""Shared test setup: never reach for the network, and quiet TensorFlow."""

import itertools
import os
import signal
import textwrap
from types import SimpleNamespace

os.environ["COURSE_OFFLINE"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402

from helpers import processes  # noqa: E402
from helpers.logs import import_tensorflow  # noqa: E402


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported quietly."""
    return import_tensorflow()


@pytest.fixture(scope="session")
def fresh_process(tmp_path_factory):
    """``run(code=..., script=..., args=(), timeout=300)``: Python ``code`` (a string) or a
    ``script`` in a process of its own, where TensorFlow is imported but was never started, so
    its devices and memory settings are still open, as in a new ``python`` (the course's fork
    server, helpers.processes: TensorFlow is imported once per test worker, not once per
    test). Returns ``returncode`` (``-9`` if SIGKILLed) and ``output`` (stdout and stderr)."""
    folder = tmp_path_factory.mktemp("fresh")
    numbers = itertools.count()

    def run(code=None, script=None, args=(), timeout=300):
        number = next(numbers)
        if code is not None:
            script = folder / f"code-{number}.py"
            script.write_text(textwrap.dedent(code))
        log = folder / f"output-{number}.txt"
        child = processes.start_script(script, [str(a) for a in args], dict(os.environ), log)
        child.join(timeout)
        if child.exitcode is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.join()
            raise AssertionError(f"{script} ran past {timeout} s:\n{log.read_text()[-2000:]}")
        return SimpleNamespace(returncode=child.exitcode, output=log.read_text())

    return run

