"""The course's errors and their messages, in one place.

Each error's message says what happened and what to do, so that a notebook shows it as one
line (no traceback): :func:`show_as_one_line` hands :data:`ONE_LINE_ERRORS` to IPython.
:func:`invalid` builds every parameter error, so that each reads ``Invalid parameter
name=value: what is allowed.``
"""

from __future__ import annotations

#: The one "too late" advice: device settings apply only before TensorFlow's first operation.
TOO_LATE = (
    "TensorFlow applies device settings only before its first operation, and this session has "
    "already started its devices. Restart the kernel (Colab: Runtime > Restart session) and "
    "run the notebook from the top."
)

#: What to do when TensorFlow cannot switch a GPU between a memory limit and memory growth.
CANNOT_SWITCH = (
    "TensorFlow cannot switch a GPU between a memory limit and memory growth in one process: "
    "restart the kernel (Colab: Runtime > Restart session) to change it."
)


#: The restart advice when an engine read its settings before the notebook could set them.
ENGINE_TOO_LATE = (
    "{what} reads {setting} once, at its first import, and this kernel already imported it. "
    "Restart the kernel (Colab: Runtime > Restart session) and run the notebook from its first "
    "cell."
)


def engine_too_late(what: str, setting: str, in_force: str) -> str:
    """The message of :class:`EngineError`: ``in_force`` and what to do."""
    return f"{in_force}: " + ENGINE_TOO_LATE.format(what=what, setting=setting)


def too_late(asked: str, in_force: str, hint: str = "") -> str:
    """The "too late" message: what was asked for, what is in force instead, what to do.

    For example ``too_late("4 logical CPU devices", "TensorFlow already started with 1")``."""
    return f"Asked for {asked}, but {in_force}. {TOO_LATE}{hint}"


class ParameterError(ValueError):
    """An invalid notebook parameter (see :func:`invalid`)."""


def invalid(name: str, value: object, allowed: str) -> ParameterError:
    """The one way to build a parameter error: its parameter, its value and what is allowed,
    e.g. ``Invalid parameter epochs=0: allowed: an integer of at least 1.``"""
    return ParameterError(f"Invalid parameter {name}={value!r}: {allowed.rstrip('.')}.")


class LateConfigurationError(RuntimeError):
    """A device setting came after TensorFlow had already started its devices."""


class AcceleratorUnavailable(RuntimeError):
    """The accelerator that was asked for is not on this runtime."""


class NoTensorFlowError(ImportError):
    """This runtime has no TensorFlow (see :func:`helpers.logs.no_tensorflow_message`)."""


class MemoryBudgetExceeded(MemoryError):
    """A step needed more host memory than the budget allowed (the CPU's stand-in for OOM)."""


class ChildOutOfMemory(MemoryError):
    """The child process ran out of memory (a real OOM on its GPU, or host memory)."""


class ChildDied(RuntimeError):
    """The child process ended without reporting back (a crash, not an out-of-memory kill)."""

    def __init__(self, message: str, pid: int | None = None, exitcode: int | None = None):
        super().__init__(message)
        self.pid, self.exitcode = pid, exitcode


class ChildTimeout(TimeoutError):
    """The child process did not report back in time; it was killed."""

    def __init__(self, message: str, pid: int | None = None):
        super().__init__(message)
        self.pid = pid


class EngineError(RuntimeError):
    """This kernel already runs another engine than the notebook needs (Keras on another
    backend, JAX started with other devices): only a restart changes that."""


class RunUnreadable(RuntimeError):
    """A run folder's checkpoints all fail to load: a new run there would bury them."""


class WorkFolderBusy(RuntimeError):
    """Another process holds the work folder's lock (:func:`helpers.workdirs.lock`)."""


class WorkersRefused(RuntimeError):
    """Workers that listen on ports were not started: other machines could reach them here
    (:func:`helpers.scale_out_profile.exposure`)."""


class RunSettingsChanged(RuntimeError):
    """A run folder holds a run made with other settings than this one's: resuming it would
    mix the two, so nothing is loaded and nothing is deleted."""


class ExerciseNotDone(RuntimeError):
    """An exercise cell still holds its placeholder (``...``): raised by a check's
    :func:`helpers.exercises.require`, and turned by :func:`helpers.exercises.check` into its
    "not yet" line."""

    def __init__(self, message: str = "The exercise still holds its placeholder (`...`): "
                 "complete it, run it, then run its check."):
        super().__init__(message)


#: Errors a notebook shows as their one line.
ONE_LINE_ERRORS: tuple[type[BaseException], ...] = (
    ParameterError,
    LateConfigurationError,
    AcceleratorUnavailable,
    NoTensorFlowError,
    MemoryBudgetExceeded,
    ChildOutOfMemory,
    ChildDied,
    ChildTimeout,
    EngineError,
    RunSettingsChanged,
    WorkFolderBusy,
    WorkersRefused,
    RunUnreadable,
    ExerciseNotDone,
)


def _one_line(shell, etype, evalue, tb, tb_offset=None):
    """IPython custom exception handler: report the error as one line, no traceback.

    IPython ignores what a custom handler returns when code fails, so it sends
    the error itself (the cell still fails, and papermill stops there).
    """
    line = f"{etype.__name__}: {evalue}"
    show = getattr(shell, "_showtraceback", None)
    if show is not None:
        show(etype, evalue, [line])
    else:
        print(line)
    return [line]


def show_as_one_line() -> bool:
    """In IPython, show :data:`ONE_LINE_ERRORS` as their one line (the cell still fails);
    elsewhere do nothing. Called where they are raised first (:func:`helpers.params.validate`,
    the engine checks), never at import. Returns whether a shell took it."""
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: tracebacks stay
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc(ONE_LINE_ERRORS, _one_line)
    return True
