"""Exercises that check themselves: a cell the learner completes (``# Exercise NN.k: title``,
placeholders ``...``), then ``exercises.check("NN.k", <what it defined>)``, which never raises: it
shows "right" and what that proves, or "not yet", what is wrong and, after an attempt, a hint, and
records it (``EXERCISE_MIME``). Checks are in ``nbNN.py``, device stand-ins here."""

from __future__ import annotations

import dis
import html
import importlib
import numbers
import pkgutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from helpers.errors import ExerciseNotDone as NotDone  # a check's "still the placeholder"

EXERCISE_MIME = "application/vnd.fast-tf-course.exercise+json"
#: What an untouched exercise says: nothing more, so that "Run all" shows no hint
UNTOUCHED = ("The cell above still holds its placeholder (`...`): replace it with your answer, "
             "run it, then run this cell.")
#: What an attempt that returned None says (then the hint)
NO_RETURN = "Your code returned None where the task asks for a value: is a `return` missing?"
#: The instructions of a function whose body is only ``...``, ``pass`` or a docstring
_NOTHING = {"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"}


@dataclass(frozen=True)
class Exercise:
    id: str  # "NN.k": notebook NN's k-th exercise
    title: str
    hint: str
    check: Callable[..., str | None]  # None when right, else what is wrong
    right: str  # what passing proves


REGISTRY: dict[str, Exercise] = {}


def exercise(id: str, title: str, *, hint: str, right: str):
    """Register a check: it returns None if the answer is right, else what is wrong (or NotDone)."""

    def register(check: Callable[..., str | None]) -> Callable[..., str | None]:
        if id in REGISTRY:
            raise ValueError(f"exercise {id} is registered twice")
        REGISTRY[id] = Exercise(id, title, hint, check, right)
        return check

    return register


def require(*values: object) -> None:
    """Raise :class:`NotDone` if any of ``values`` is still a placeholder (``...`` or None)."""
    if any(v is None or v is Ellipsis for v in values):
        raise NotDone


def untouched(value: object) -> bool:
    """Whether ``value`` is ``...`` or a function whose body is still only ``...``, ``pass`` or
    a docstring (one with code of its own that returns None is an attempt)."""
    if value is Ellipsis:
        return True
    code = getattr(value, "__code__", None)
    return code is not None and all(
        i.opname in _NOTHING and (i.opname not in ("LOAD_CONST", "RETURN_CONST")
                                  or i.argval in (None, Ellipsis))
        for i in dis.get_instructions(code))


def is_number(value: object, kind: type = numbers.Integral) -> bool:
    """Whether ``value`` is a number of ``kind`` (an int by default), a bool not counted."""
    return isinstance(value, kind) and not isinstance(value, bool)


def wait_until(moment: float) -> None:
    while (left := moment - time.perf_counter()) > 0:
        time.sleep(min(left, 0.002))


class Pending:
    """A stand-in for a result on a device: its value reaches Python only through ``_read()``."""

    def numpy(self):
        return np.float32(self._read())

    def __float__(self):
        return float(self._read())

    item = __float__

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._read(), dtype=dtype)

    def __tf_tensor__(self, dtype=None, name=None):  # tf.stack(results): one read
        import tensorflow as tf

        return tf.constant(self._read(), dtype=dtype or tf.float32, name=name)

    def __repr__(self):
        return repr(self.numpy())


class Device:
    """A stand-in accelerator with a queue: the n-th :meth:`call` queues ``costs[n]`` (else
    ``work_s``) s of work, the first after ``trace_s`` s of tracing, and returns at once a result
    worth ``1 / n``. Reading one, or :meth:`sync`, waits for all; ``waits``: calls at each."""

    def __init__(self, work_s=0.0, trace_s=0.0, costs: dict[int, float] | None = None):
        self.work_s, self.trace_s, self.costs = work_s, trace_s, costs or {}
        self.calls, self.done, self.free_at, self.waits = 0, 0, 0.0, []

    def call(self, *batch) -> Pending:
        self.calls += 1
        if self.calls == 1 and self.trace_s:
            wait_until(time.perf_counter() + self.trace_s)
        cost = self.costs.get(self.calls, self.work_s)
        self.free_at = max(time.perf_counter(), self.free_at) + cost
        return _Queued(self, 1 / self.calls)

    def sync(self) -> None:
        if self.done < self.calls:
            self.waits.append(self.calls)
            self.done = self.calls
        wait_until(self.free_at)


class _Queued(Pending):
    def __init__(self, device: Device, value: float):
        self.device, self.value = device, value

    def _read(self) -> float:
        self.device.sync()
        return self.value


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    passed: bool
    message: str  # what passing proves, or what is wrong
    hint: str  # shown when an attempt did not pass ("" before any attempt)
    _shown: bool = field(default=False, compare=False, repr=False)

    def line(self) -> str:
        if self.passed:
            return f"✅ Exercise {self.exercise} ({self.title}): right. {self.message}"
        hint = f" Hint: {self.hint}" if self.hint else ""
        return f"❌ Exercise {self.exercise} ({self.title}): not yet. {self.message}{hint}"

    def _repr_mimebundle_(self, include=None, exclude=None):
        colour, line = "#1e7b34" if self.passed else "#b3261e", self.line()
        return {
            "text/plain": line,
            "text/html": f'<p style="color:{colour};font-weight:500">{html.escape(line)}</p>',
            EXERCISE_MIME: {"exercise": self.exercise, "passed": self.passed}}

    def __repr__(self) -> str:
        return self.line()

    def _ipython_display_(self) -> None:  # check() shows it; as the cell's value, not again
        if not self._shown:
            object.__setattr__(self, "_shown", True)
            from IPython.display import publish_display_data

            publish_display_data(self._repr_mimebundle_())


def load_checks() -> dict[str, Exercise]:
    """Every notebook's checks (importing ``helpers.exercises.nbNN`` registers them)."""
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("nb"):
            importlib.import_module(f"{__name__}.{module.name}")
    return REGISTRY


def check(exercise_id: str, *answer, **named) -> Verdict:
    """Check exercise ``exercise_id``, show and return the verdict; a wrong answer never raises."""
    checks = load_checks()
    if exercise_id not in checks:
        raise KeyError(f"no exercise {exercise_id!r}; the course has {sorted(checks)}")
    ex = checks[exercise_id]
    hint = ex.hint
    try:
        problem = ex.check(*answer, **named)
    except NotDone:
        given = [*answer, *named.values()]
        if not given or any(untouched(value) for value in given):
            problem, hint = UNTOUCHED, ""  # not tried yet: no hint, never the solution
        else:
            problem = NO_RETURN
    except Exception as error:  # the learner's code failed: say where, in one line
        frames = traceback.extract_tb(error.__traceback__)
        theirs = [f for f in frames if "site-packages" not in f.filename
                  and "helpers/exercises" not in f.filename.replace("\\", "/")]
        if theirs:  # the learner's own line
            problem = (f"Your code raised {type(error).__name__}: {error} "
                       f"(line {theirs[-1].lineno}: {(theirs[-1].line or '').strip()})")
        else:  # it failed in the check, on what the learner's code gave it: never the check's line
            problem = (f"What your code returned could not be used as the task asks: "
                       f"{type(error).__name__}: {error}")
    verdict = Verdict(ex.id, ex.title, problem is None, problem or ex.right, hint)
    _show(verdict)
    return verdict


def _show(verdict: Verdict) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(verdict)
    else:
        print(verdict.line())
