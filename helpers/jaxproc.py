"""A second Python process for Keras on JAX, next to a kernel that runs Keras on TensorFlow.

Keras picks its backend once, when it is first imported, and notebook 05's TensorFlow
lessons need Keras on TensorFlow in the kernel; Keras on JAX therefore runs in a child
process. JAX also fixes its device count (``XLA_FLAGS``) when it starts, and a TPU serves
one process at a time: one child, started fresh for each "Run all", owns JAX.

The notebook's own cells define the JAX code as ordinary functions, decorated with a
:class:`JaxProcess`::

    in_jax_process = JaxProcess()

    @in_jax_process
    def start_keras_on_jax(devices):
        import os
        os.environ["KERAS_BACKEND"] = "jax"
        ...

Calling ``start_keras_on_jax(8)`` sends the function's source (exactly the cell's text,
without the decorator line) to the child, runs it there and brings back its return value
(anything picklable: numbers, lists, NumPy arrays) and what it printed. The functions share
one namespace in the child, so one may call another. Nothing of this is a lesson: it is a
process launcher. :func:`functions_in_notebook` reads the same functions out of a notebook,
so tests and ``make bench`` run the code the learner reads, not a copy of it.
Used by: 05_tpu_distribute, ``make bench``, tests/test_keras_jax.py.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

from helpers.errors import JaxProcessError


def function_source(source: str, name: str | None = None) -> dict[str, str]:
    """Top-level functions in ``source`` (a cell or a file), without their decorators:
    name -> source text. With ``name``, only that one. Used by: 05 (through the decorator)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and (name is None or node.name == name):
            found[node.name] = "".join(lines[node.lineno - 1 : node.end_lineno])
    return found


def _decorated_with(node: ast.FunctionDef, decorator: str) -> bool:
    return any(isinstance(d, ast.Name) and d.id == decorator for d in node.decorator_list)


def functions_in_notebook(path, decorator: str = "in_jax_process") -> dict[str, str]:
    """Every function a notebook's code cells decorate with ``decorator``: name -> source,
    in cell order. Cells with IPython syntax (``%pip``) are skipped.
    Used by: ``make bench`` (keras_jax_vs_tf_fit), tests/test_keras_jax.py."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    found = {}
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        text = "".join(cell["source"])
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        wanted = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                  and _decorated_with(n, decorator)}
        found.update({k: v for k, v in function_source(text).items() if k in wanted})
    return found


class _Remote:
    """A function defined in the notebook that runs in the JAX process when called."""

    def __init__(self, process: JaxProcess, name: str, source: str, doc: str | None):
        self.process, self.__name__, self.source, self.__doc__ = process, name, source, doc

    def __call__(self, *args, **kwargs):
        return self.process.call(self.__name__, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.__name__}, run in the JAX process>"


def _stop(proc: subprocess.Popen, conn: Connection) -> None:
    conn.close()
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class JaxProcess:
    """The child process that runs the functions it decorates (see the module's docstring).

    It starts at the first call. Making a new one ends the previous one (one process owns
    JAX and its devices, and a TPU serves one process), as does :meth:`close`, or the end of
    the kernel.
    Used by: 05, ``make bench``.
    """

    _current: dict[str, JaxProcess] = {}

    def __init__(self, python: str = sys.executable, key: str = "kernel"):
        """``key``: a new process ends the running one with the same key (tests use their own)."""
        if key in JaxProcess._current:
            JaxProcess._current[key].close()
        JaxProcess._current[key] = self
        self.python, self.key = python, key
        self.functions: dict[str, str] = {}
        self._sent: dict[str, str] = {}
        self._proc = self._conn = self._log = None
        self._log_offset = 0
        self._finalizer = None

    def __call__(self, fn):
        """Decorator: ``fn`` is to run in the JAX process."""
        source = function_source(textwrap.dedent(inspect.getsource(fn)), fn.__name__)
        return self.define(fn.__name__, source[fn.__name__], fn.__doc__)

    def define(self, name: str, source: str, doc: str | None = None) -> _Remote:
        """Register a function from its source text (what the decorator does)."""
        self.functions[name] = source
        return _Remote(self, name, source, doc)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        parent_read, child_write = os.pipe()
        child_read, parent_write = os.pipe()
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [self.python, "-m", "helpers.jaxproc", str(child_read), str(child_write)],
            pass_fds=(child_read, child_write),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        os.close(child_read)
        os.close(child_write)
        self._conn = _Duplex(parent_read, parent_write)
        self._sent = {}
        self._finalizer = weakref.finalize(self, _stop, self._proc, self._conn)

    def call(self, name: str, *args, **kwargs):
        """Run ``name`` in the child with these arguments; print what it printed; return
        what it returned."""
        self.start()
        changed = {k: v for k, v in self.functions.items() if self._sent.get(k) != v}
        try:
            self._conn.send((changed, name, args, kwargs))
            self._sent.update(changed)
            status, value, printed = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            self._pass_on_log()
            code = self._proc.wait()
            raise JaxProcessError(f"the JAX process ended (exit status {code})") from None
        if printed:
            print(printed, end="")
        self._pass_on_log()
        if status == "error":
            raise JaxProcessError(f"{name} failed in the JAX process:\n{value}")
        return value

    def _pass_on_log(self) -> None:
        """What the child's native code wrote (its stderr), less JAX's and TF's known
        start-up notices."""
        from helpers.logs import drop_native_noise

        self._log.seek(self._log_offset)
        text = self._log.read().decode(errors="replace")
        self._log_offset += len(text.encode())
        rest = drop_native_noise(text)
        if rest.strip():
            sys.stderr.write(rest)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None
        if JaxProcess._current.get(self.key) is self:
            del JaxProcess._current[self.key]


class _Duplex:
    """Two one-way pipes as one connection (pickled messages)."""

    def __init__(self, read_fd: int, write_fd: int):
        self._read, self._write = Connection(read_fd, writable=False), Connection(
            write_fd, readable=False
        )

    def send(self, obj) -> None:
        self._write.send(obj)

    def recv(self):
        return self._read.recv()

    def close(self) -> None:
        self._read.close()
        self._write.close()


def serve(read_fd: int, write_fd: int) -> None:
    """The child's loop: (re)define the functions sent, call one, send back
    (status, value, what it printed)."""
    import contextlib
    import io
    import traceback

    conn = _Duplex(read_fd, write_fd)
    namespace: dict = {"__name__": "__jax_process__"}
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        functions, name, args, kwargs = message
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                for defined, source in functions.items():
                    exec(compile(source, f"<notebook: {defined}>", "exec"), namespace)
                value = namespace[name](*args, **kwargs)
            reply = ("ok", value, printed.getvalue())
        except BaseException:  # noqa: B036 (sent to the parent, which raises it)
            reply = ("error", traceback.format_exc(), printed.getvalue())
        try:
            conn.send(reply)
        except Exception as error:  # an unpicklable return value
            conn.send(("error", f"{name} returned what cannot be sent back: {error}", ""))


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
