"""Fresh processes that start with TensorFlow already imported (notebooks 06 and 07).

Importing TensorFlow takes about 15 CPU seconds on a 2-core machine, and notebook 06's memory
trials and notebook 07's workers each need a process of their own. They come from one fork
server (``multiprocessing``'s ``forkserver``): a process that imports :data:`PRELOAD` once,
when it starts, and forks each child from there. A child is still fresh where it matters: its
TensorFlow was imported but never started (no device listed, no memory setting, no thread of
the kernel's), so it sets ``CUDA_VISIBLE_DEVICES``, ``TF_CONFIG`` and its memory limits as a new
``python`` process would. Where there is no fork server (Windows), children are spawned.

The server lives as long as the process that started it; a module that is missing (no
TensorFlow on a TPU runtime) is skipped by the server. At exit, ``multiprocessing`` waits for
every child still running: a module that starts children and imports this one registers its own
``atexit`` hook afterwards, which runs first (hooks run last-registered first) and ends them.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util  # registers its exit hook (it joins children) before any of ours
import os
import runpy
import sys

#: what the fork server imports once, for every child
PRELOAD = ["tensorflow", "keras", "helpers.out_of_memory", "helpers.scale_out_profile"]


def context():
    """The ``multiprocessing`` context children come from: the fork server, or ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    server = multiprocessing.get_context("forkserver")
    server.set_forkserver_preload(PRELOAD)  # read when the server starts
    return server


def start_script(script, args: list[str], env: dict[str, str], log) -> multiprocessing.Process:
    """Start ``python script *args`` in a child (:func:`context`) with exactly the environment
    ``env``, its output (and TensorFlow's) in the file ``log``, in a process group of its own
    (so that killing the group ends whatever it started, and Jupyter's interrupt stays with the
    kernel). Its ``exitcode`` is the script's exit status, or ``-9`` when it was SIGKILLed."""
    child = context().Process(target=_run_script, args=(str(script), list(args), dict(env),
                                                        str(log)), daemon=False)
    child.start()
    return child


def _run_script(script: str, args: list[str], env: dict[str, str], log: str) -> None:
    if os.name == "posix":
        os.setsid()
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream, number in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        os.dup2(fd, number)
    os.close(fd)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")
