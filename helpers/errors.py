"""The course's errors: each says what happened and what to do, in one line in a notebook."""

_RESTART = "Restart the kernel (Colab: Runtime > Restart session)"
TOO_LATE = ("TensorFlow applies device settings only before its first operation, and this session "
            f"has already started its devices. {_RESTART} and run the notebook from the top.")
CANNOT_SWITCH = ("TensorFlow cannot switch a GPU between a memory limit and memory growth in one "
                 "process: restart the kernel (Colab: Runtime > Restart session) to change it.")


def engine_too_late(what: str, setting: str, in_force: str) -> str:
    """The message of :class:`EngineError`: ``in_force``, then the restart advice."""
    return (f"{in_force}: {what} reads {setting} once, at its first import, and this kernel "
            f"already imported it. {_RESTART} and run the notebook from its first cell.")


def too_late(asked: str, in_force: str) -> str:
    """E.g. ``too_late("4 logical CPU devices", "TensorFlow already started with 1")``."""
    return f"Asked for {asked}, but {in_force}. {TOO_LATE}"


class ParameterError(ValueError):
    """An invalid notebook parameter (see :func:`invalid`)."""


def invalid(name: str, value: object, allowed: str) -> ParameterError:
    """The one way to build a parameter error: its parameter, its value and what is allowed."""
    return ParameterError(f"Invalid parameter {name}={value!r}: {allowed.rstrip('.')}.")


class LateConfigurationError(RuntimeError):
    """A device setting came after TensorFlow had already started its devices."""


class AcceleratorUnavailable(RuntimeError):
    """The accelerator that was asked for is not on this runtime."""


class NoTensorFlowError(ImportError):
    """This runtime has no TensorFlow (see :func:`helpers.logs.no_tensorflow_message`)."""


class ChildOutOfMemory(MemoryError):
    """The child process ran out of memory (a real OOM on its GPU, or host memory)."""


class ChildDied(RuntimeError):
    """The child process ended without reporting back (a crash, not an out-of-memory kill)."""


class ChildTimeout(TimeoutError):
    """The child process did not report back in time; it was killed (its ``pid`` set)."""


class EngineError(RuntimeError):
    """This kernel already runs another engine (or devices) than the notebook needs."""


class RunUnreadable(RuntimeError):
    """A run folder's checkpoints all fail to load: a new run there would bury them."""


class WorkFolderBusy(RuntimeError):
    """Another process holds the work folder's lock (:func:`helpers.workdirs.lock`)."""


class WorkersRefused(RuntimeError):
    """Workers that listen on ports were not started: other machines could reach them here."""


class DiskFull(OSError):
    """A save failed because its disk is full; what it had written was removed."""


class RunSettingsChanged(RuntimeError):
    """A run folder holds a run made with other settings: nothing is loaded or deleted."""


class ExerciseNotDone(RuntimeError):
    """An exercise still holds its placeholder (``...``): exercises.check says so in one line."""


ONE_LINE_ERRORS: tuple[type[BaseException], ...] = tuple(  # every error above: one line shown
    v for v in list(globals().values()) if isinstance(v, type) and issubclass(v, BaseException))


def _one_line(shell, etype, evalue, tb, tb_offset=None):
    """IPython's custom exception handler: the error as one line (the cell still fails)."""
    line = f"{etype.__name__}: {evalue}"
    shell._showtraceback(etype, evalue, [line])
    return [line]


def show_as_one_line() -> None:
    """In IPython, show :data:`ONE_LINE_ERRORS` as one line (plain Python keeps tracebacks)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is not None:
        get_ipython().set_custom_exc(ONE_LINE_ERRORS, _one_line)
