"""Exercises that check themselves: the learner completes a cell, the next cell says right or
wrong, with a hint.

Every notebook has an "## Exercises" section of two to four exercises. Each is two cells:

- the exercise, which the learner completes: its first line is ``# Exercise NN.k: title`` and
  its placeholders are ``...`` (a function whose body is ``...`` returns ``None``);
- its check, ``exercises.check("NN.k", <what the exercise defined>)``.

:func:`check` never raises, so "Run all" goes on past an unfinished exercise: it shows one line,
"right" with what that proves, or "not yet" with what is wrong and, after an attempt, a hint.
An untouched exercise (its ``...`` still there) gets "not yet" and nothing more, so "Run all"
never shows a hint before the learner has tried; code that returns None where a value is due
is told that a ``return`` may be missing. It also leaves a
record (``EXERCISE_MIME``) that the tests read. Each check calls the learner's code on inputs
chosen to expose the usual mistake (a timer that never waits for the device, a loss averaged
per replica, a search that tries every batch size), on the CPU, offline, and in well under a
second; the same code runs on a GPU or TPU.

The solutions are kept out of the learner's way, in ``solutions/NN_name.py``;
``tools/exercises.py`` writes copies of the notebooks with them in place (``make solutions``).
``make test`` proves both sides: every check says "not yet" to the untouched exercise, and
"right" to its solution.

The checks live in one module per notebook (``helpers/exercises/nbNN.py``), each registering
its own with :func:`exercise`.
"""

from __future__ import annotations

import dis
import html
import importlib
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from helpers.errors import ExerciseNotDone as NotDone  # a check's "still the placeholder"

EXERCISE_MIME = "application/vnd.fast-tf-course.exercise+json"


@dataclass(frozen=True)
class Exercise:
    id: str  # "NN.k": notebook NN's k-th exercise
    title: str
    hint: str
    check: Callable[..., str | None]  # None when right, else what is wrong
    right: str  # what passing proves


REGISTRY: dict[str, Exercise] = {}


def exercise(id: str, title: str, *, hint: str, right: str):
    """Register a check: a function of what the exercise defined, which returns ``None`` when
    it is right and otherwise a short sentence saying what is wrong (or raises
    :class:`NotDone`)."""

    def register(check: Callable[..., str | None]) -> Callable[..., str | None]:
        if id in REGISTRY:
            raise ValueError(f"exercise {id} is registered twice")
        REGISTRY[id] = Exercise(id, title, hint, check, right)
        return check

    return register


def placeholder(value: object) -> bool:
    """Whether ``value`` is what an untouched exercise leaves: ``...`` or ``None``."""
    return value is None or value is Ellipsis


#: The instructions of a function that does nothing but return None or ``...`` (its body
#: ``...``, ``pass`` or a docstring), in every Python the course runs on
_NOTHING = {"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"}


def untouched(value: object) -> bool:
    """Whether ``value`` is an answer not yet written: ``...``, or a function whose body is
    still only ``...`` (or ``pass``, or a docstring). A function with code of its own that
    returns None is an attempt (a ``return`` left out), not this."""
    if value is Ellipsis:
        return True
    code = getattr(value, "__code__", None)
    if code is None:
        return False
    return all(i.opname in _NOTHING and (i.opname not in ("LOAD_CONST", "RETURN_CONST")
                                         or i.argval in (None, Ellipsis))
               for i in dis.get_instructions(code))


#: What an untouched exercise says: nothing more, so that "Run all" shows no hint
UNTOUCHED = ("The cell above still holds its placeholder (`...`): replace it with your answer, "
             "run it, then run this cell.")
#: What an attempt that returned None says (then the hint)
NO_RETURN = "Your code returned None where the task asks for a value: is a `return` missing?"


def require(*values: object) -> None:
    """Raise :class:`NotDone` if any of ``values`` is still a placeholder."""
    if any(placeholder(v) for v in values):
        raise NotDone


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

    def record(self) -> dict:
        return {"exercise": self.exercise, "passed": self.passed}

    def _repr_mimebundle_(self, include=None, exclude=None):
        colour = "#1e7b34" if self.passed else "#b3261e"
        body = html.escape(self.line())
        return {
            "text/plain": self.line(),
            "text/html": f'<p style="color:{colour};font-weight:500">{body}</p>',
            EXERCISE_MIME: self.record(),
        }

    def __repr__(self) -> str:
        return self.line()

    def _ipython_display_(self) -> None:
        """Shown once: :func:`check` shows it, and as the check cell's last value IPython
        would show it again."""
        if self._shown:
            return
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
    """Check exercise ``exercise_id`` against what the learner defined, show the verdict (one
    line) and return it. Never raises for a wrong or unfinished answer: "Run all" goes on."""
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
            frame = theirs[-1]
            problem = (f"Your code raised {type(error).__name__}: {error} "
                       f"(line {frame.lineno}: {(frame.line or '').strip()})")
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
        print(verdict.line())
        return
    if get_ipython() is None:
        print(verdict.line())
    else:
        display(verdict)
