"""Exercises that check themselves: a ``# Exercise NN.k`` cell, then ``exercises.check("NN.k")``."""

import contextlib
import dis
import html
import importlib
import numbers
import pkgutil
import sys
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from helpers.errors import ExerciseNotDone as NotDone  # a check's "still the placeholder"

EXERCISE_MIME = "application/vnd.fast-tf-course.exercise+json"
#: What an untouched exercise says, and nothing more: "Run all" shows no hint
UNTOUCHED = ("The cell above still holds its placeholder (`...`): replace it with your answer, "
             "run it, then run this cell.")
NO_RETURN = "Your code returned None where the task asks for a value: is a `return` missing?"
_NOTHING = {"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"}


@dataclass(frozen=True)
class Exercise:
    id: str  # "NN.k": notebook NN's k-th exercise
    title: str
    hint: str  # for a second, different wrong try
    check: Callable[..., str | None]  # None when right, else what is wrong
    right: str  # what passing proves
    where: str = "the section of this notebook that the task names"  # for a first wrong try


REGISTRY: dict[str, Exercise] = {}
TRIES: dict[str, tuple[object, int]] = {}  # id: (last answer's fingerprint, 0 none/1 where/2 hint)


def exercise(id: str, title: str, *, hint: str, right: str, where: str = Exercise.where):
    """Register a check: it returns None if the answer is right, else what is wrong (or NotDone)."""
    def register(check: Callable[..., str | None]) -> Callable[..., str | None]:
        if id in REGISTRY:
            raise ValueError(f"exercise {id} is registered twice")
        REGISTRY[id] = Exercise(id, title, hint, check, right, where)
        return check
    return register


def require(*values: object) -> None:
    """Raise :class:`NotDone` if any of ``values`` is still a placeholder (``...`` or None)."""
    if any(v is None or v is Ellipsis for v in values):
        raise NotDone


def untouched(value: object) -> bool:
    """Whether ``value`` is ``...`` or a function whose body is only ``...``, pass, a docstring."""
    code = getattr(value, "__code__", None)
    return value is Ellipsis or code is not None and all(
        i.opname in _NOTHING and (i.opname not in ("LOAD_CONST", "RETURN_CONST")
                                  or i.argval in (None, Ellipsis))
        for i in dis.get_instructions(code))


def fingerprint(value: object) -> object:
    """What tells answers apart across runs of a cell (a function's code, not its comments)."""
    value = getattr(value, "__func__", getattr(value, "__wrapped__", value))  # tf.function, jit
    if isinstance(value, types.FunctionType):
        value = (value.__code__, value.__defaults__, value.__kwdefaults__)
    if isinstance(value, types.CodeType):
        value = (value.co_code, value.co_names, value.co_consts)
    if isinstance(value, dict | list | tuple | set | frozenset):
        parts = tuple(map(fingerprint, value.items() if isinstance(value, dict) else value))
        return tuple(sorted(parts, key=repr)) if isinstance(value, set | frozenset) else parts
    plain = value is None or value is Ellipsis or isinstance(value, str | bytes | numbers.Number)
    return repr(value) if plain else type(value).__qualname__


def is_number(value: object, kind: type = numbers.Integral) -> bool:
    """Whether ``value`` is a number of ``kind`` (an int by default), a bool not counted."""
    return isinstance(value, kind) and not isinstance(value, bool)


@contextlib.contextmanager
def patched(changes: dict[tuple[object, str], object], *spaces: dict):
    """Set each ``(owner, name)`` to its stand-in while it lasts, and every name of ``__main__``
    and ``spaces`` (globals) bound to its original (``from numpy import asarray``), then put
    every original back, also where code run meanwhile copied a stand-in (a module it imported)."""
    originals = {key: getattr(*key) for key in changes}
    stand_in = {id(originals[key]): value for key, value in changes.items()}
    spaces = {id(s): s for s in (vars(sys.modules["__main__"]), *spaces)}.values()
    known = set(sys.modules)
    try:
        for (owner, name), value in changes.items():
            setattr(owner, name, value)
        for space in spaces:
            space.update({k: stand_in[id(v)] for k, v in list(space.items()) if id(v) in stand_in})
        yield
    finally:
        real = {id(changes[key]): value for key, value in originals.items()}
        for (owner, name), value in originals.items():
            setattr(owner, name, value)
        copies = [getattr(sys.modules[name], "__dict__", None) for name in set(sys.modules) - known]
        for space in [*(c for c in copies if isinstance(c, dict)), *spaces]:  # no class's proxy
            space.update({k: real[id(v)] for k, v in list(space.items()) if id(v) in real})


@contextlib.contextmanager
def keras_as_found(keras):
    """Keras's distribution and global dtype policy set back as found, whatever an answer set."""
    found = keras.distribution.distribution(), keras.mixed_precision.global_policy()
    try:
        yield found[1]  # the policy found
    finally:
        keras.distribution.set_distribution(found[0])
        keras.mixed_precision.set_global_policy(found[1])


def wait_until(moment: float) -> None:
    while (left := moment - time.perf_counter()) > 0:
        time.sleep(min(left, 0.002))


class Pending:
    """A result queued on a :class:`Device`: reading its value waits for the device."""

    def __init__(self, device: "Device", value: float):
        self.device, self.value = device, value

    def _read(self) -> float:
        return self.device.sync() or self.value  # sync() returns None

    def numpy(self):
        return np.float32(self._read())

    def __float__(self):
        return float(self._read())

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._read(), dtype=dtype)

    def __tf_tensor__(self, dtype=None, name=None):  # tf.stack(results): one read
        import tensorflow as tf
        return tf.constant(self._read(), dtype=dtype or tf.float32, name=name)

    def __repr__(self):
        return repr(self.numpy())


class Device:
    """A stand-in accelerator: :meth:`call` queues work and returns at once; a read waits for it."""

    def __init__(self, work_s=0.0, trace_s=0.0, costs: dict[int, float] | None = None):
        self.work_s, self.trace_s, self.costs = work_s, trace_s, costs or {}
        self.calls, self.free_at = 0, 0.0

    def call(self, *batch) -> Pending:
        self.calls += 1
        if self.calls == 1 and self.trace_s:
            wait_until(time.perf_counter() + self.trace_s)
        cost = self.costs.get(self.calls, self.work_s)
        self.free_at = max(time.perf_counter(), self.free_at) + cost
        return Pending(self, 1 / self.calls)

    def sync(self) -> None:
        wait_until(self.free_at)


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    passed: bool
    message: str  # what passing proves, or what is wrong
    hint: str  # after a wrong try: "Where to look: ..." or "Hint: ..."; else ""
    _shown: bool = field(default=False, compare=False, repr=False)

    def line(self) -> str:
        mark, said = ("✅", "right") if self.passed else ("❌", "not yet")
        return f"{mark} Exercise {self.exercise} ({self.title}): {said}. " + " ".join(
            filter(None, (self.message, self.hint)))

    def _repr_mimebundle_(self, include=None, exclude=None):
        colour, line = "#1e7b34" if self.passed else "#b3261e", self.line()
        return {"text/plain": line, EXERCISE_MIME: {"exercise": self.exercise,
                                                    "passed": self.passed},
                "text/html": f'<p style="color:{colour};font-weight:500">{html.escape(line)}</p>'}

    __repr__ = line

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
    if (ex := load_checks().get(exercise_id)) is None:
        raise KeyError(f"no exercise {exercise_id!r}; the course has {sorted(REGISTRY)}")
    try:
        problem = ex.check(*answer, **named)
    except NotDone:
        given = [*answer, *named.values()]
        problem = UNTOUCHED if not given or any(map(untouched, given)) else NO_RETURN
    except Exception as error:  # the learner's code failed: say where, in one line
        theirs = [f for f in traceback.extract_tb(error.__traceback__) if "site-packages"
                  not in f.filename and "helpers/exercises" not in f.filename.replace("\\", "/")]
        problem = (f"Your code raised {type(error).__name__}: {error} (line {theirs[-1].lineno}: "
                   f"{(theirs[-1].line or '').strip()})" if theirs  # else never the check's line
                   else "What your code returned could not be used as the task asks: "
                        f"{type(error).__name__}: {error}")
    hint, (last, level) = "", TRIES.get(ex.id, ("", 0))
    if problem != UNTOUCHED:  # a try: a step further if wrong and not the last answer checked
        now = fingerprint((answer, sorted(named.items())))
        TRIES[ex.id] = now, (level := min(level + (problem is not None and now != last), 2))
        hint = ("", f"Where to look: {ex.where}. A changed answer that is still "
                    f"wrong gets a hint.", f"Hint: {ex.hint}")[level if problem else 0]
    verdict = Verdict(ex.id, ex.title, problem is None, problem or ex.right, hint)
    _show(verdict)
    return verdict


def _show(verdict: Verdict) -> None:
    if getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)():  # in a kernel
        verdict._ipython_display_()
    else:
        print(verdict.line())
