"""Validate a notebook's papermill parameters, failing with one clear line.

Every notebook calls :func:`validate` in the cell right after its
``parameters`` cell. An invalid value raises :class:`ParameterError` whose
message names the parameter, the value given and what is allowed; inside
IPython the error shows as that one line, not a traceback.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

from helpers import errors, workdirs
from helpers.errors import ParameterError, invalid

__all__ = ["ParameterError"]  # raised by every rule here; defined in helpers.errors

Rule = Callable[[str, object], object]
ACCELERATORS = ("auto", "cpu", "gpu", "tpu")


def _same(value: object, choice: object) -> bool:
    """Equal and of the same kind: ``1`` is not ``True``, nor ``1.0`` the integer ``1``."""
    return type(value) is type(choice) and value == choice


def one_of(*choices: object) -> Rule:
    """Allow exactly these values (``1`` does not pass for ``True``, nor ``0`` for ``False``)."""

    def rule(name: str, value: object) -> object:
        if not any(_same(value, choice) for choice in choices):
            raise invalid(name, value, "allowed values are " + ", ".join(map(repr, choices)))
        return value

    return rule


def integer(minimum: int | None = None, maximum: int | None = None) -> Rule:
    """Allow an integer (not a bool) within the given bounds."""
    if minimum is not None and maximum is not None:
        allowed = f"expected an integer from {minimum} to {maximum}"
    elif minimum is not None:
        allowed = f"expected an integer >= {minimum}"
    elif maximum is not None:
        allowed = f"expected an integer <= {maximum}"
    else:
        allowed = "expected an integer"

    def rule(name: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(name, value, allowed)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise invalid(name, value, allowed)
        return value

    return rule


def number(minimum: float | None = None, maximum: float | None = None) -> Rule:
    """Allow an int or float within the given (inclusive) bounds."""
    allowed = f"expected a number from {minimum} to {maximum}"

    def rule(name: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(name, value, allowed)
        try:
            finite = math.isfinite(value)  # NaN passes every comparison below
        except OverflowError:  # an int beyond any float, e.g. 10**400
            finite = False
        if not finite:
            raise invalid(name, value, allowed + " (a finite one)")
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise invalid(name, value, allowed)
        return float(value)

    return rule


def boolean() -> Rule:
    """Allow True or False only (papermill passes real booleans)."""

    def rule(name: str, value: object) -> object:
        if not isinstance(value, bool):
            raise invalid(name, value, "expected True or False")
        return value

    return rule


def check(test: Callable[[object], bool], allowed: str) -> Rule:
    """Allow values for which ``test(value)`` is true; ``allowed`` says which."""

    def rule(name: str, value: object) -> object:
        if not test(value):
            raise invalid(name, value, allowed)
        return value

    return rule


def folder(inside: str | None = None) -> Rule:
    """Allow a work folder that the notebook may empty (:mod:`helpers.workdirs`): a folder name
    that does not exist yet, is empty, or holds the marker of a folder this course made; never
    the working folder, one above it, home or ``/``. Returns the name as given.

    ``inside``: the folder the name is taken relative to, and must lie strictly within
    (04 with ``use_drive``: Drive's ``MyDrive``).
    """
    def rule(name: str, value: object) -> object:
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise invalid(name, value, "expected a folder name; allowed: " + workdirs.ALLOWED)
        if '"' in value or not value.isprintable():  # the cells quote it in %%writefile "..."
            raise invalid(name, value, "expected a folder name without quotes or line breaks")
        if value.startswith("~"):  # Python does not expand it: it would make a folder named ~
            full = os.path.expanduser(value)
            raise invalid(name, value, "~ is not expanded here: give the full path"
                        + (f" ({full})" if full != value else ""))
        path = Path(value)
        if inside is not None:
            base = Path(inside)
            path = base / value
            if base.resolve() not in path.resolve().parents:
                raise workdirs.refuse(name, value, f"it is not a folder inside {inside}")
        if (why := workdirs.problem(path)) is not None:
            raise workdirs.refuse(name, value, why)
        return value

    return rule


def accelerator(available: Callable[[], list[str]]) -> Rule:
    """An ``accelerator`` parameter: one of "auto", "cpu", "gpu", "tpu", and one this runtime
    has (``available()`` lists those; it is asked only for a known value)."""

    def rule(name: str, value: object) -> object:
        if value not in ACCELERATORS:
            raise invalid(name, value, f"allowed values are {', '.join(map(repr, ACCELERATORS))}")
        here = available()
        if value not in here:
            raise invalid(name, value, f"this runtime has no {str(value).upper()}; allowed here: "
                        f"{', '.join(map(repr, here))}")
        return value

    return rule


def list_of(item: Rule, allowed: str, min_length: int = 1, unique: bool = True) -> Rule:
    """Allow a non-empty list (or tuple) whose items each pass ``item``; ``allowed`` says what."""

    def rule(name: str, value: object) -> object:
        if not isinstance(value, list | tuple) or len(value) < min_length:
            raise invalid(name, value, allowed)
        try:
            repeats = unique and len(set(value)) != len(value)
        except TypeError:  # an item that cannot be one (a list in the list)
            raise invalid(name, value, allowed) from None
        if repeats:
            raise invalid(name, value, allowed + " (no repeats)")
        try:
            return [item(name, each) for each in value]
        except ParameterError:
            raise invalid(name, value, allowed) from None

    return rule


def enough_images(global_batch: object, batches: int = 2) -> Rule:
    """Allow an image count of at least ``batches`` global batches (``global_batch`` is another
    parameter's raw value: where it is not a positive integer, its own rule reports that)."""

    def rule(name: str, value: object) -> object:
        if not isinstance(global_batch, int) or isinstance(global_batch, bool) or global_batch < 1:
            return value
        whole = isinstance(value, int) and not isinstance(value, bool)
        if whole and value < batches * global_batch:
            raise invalid(name, value, f"at least {batches} global batches "
                        f"({batches * global_batch} images for global_batch_size={global_batch})")
        return value

    return rule


def all_of(*rules: Rule) -> Rule:
    """Apply several rules in order; the first that fails reports."""

    def rule(name: str, value: object) -> object:
        for each in rules:
            value = each(name, value)
        return value

    return rule


def validate(echo: bool = True, **specs: tuple[object, Rule]) -> SimpleNamespace:
    """Check each ``name=(value, rule)``; return the values as attributes.

    With ``echo`` (the default) it prints one line listing the values in force.

    >>> p = validate(epochs=(3, integer(1)))
    Parameters: epochs=3
    >>> p.epochs
    3
    """
    errors.show_as_one_line()  # in IPython, what the rules raise shows as one line
    values = {}
    for name, spec in specs.items():
        if not (isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1])):
            raise TypeError(f"validate({name}=...) takes a (value, rule) pair")
        value, rule = spec
        values[name] = rule(name, value)
    params = SimpleNamespace(**values)
    if echo:
        print("Parameters:", show(params))
    return params


def show(params: SimpleNamespace, names: Iterable[str] | None = None) -> str:
    """One line listing the parameters in force, e.g. ``epochs=3, batch_size=64``."""
    items = vars(params)
    names = list(items) if names is None else list(names)
    return ", ".join(f"{name}={items[name]!r}" for name in names)


def available_memory() -> int | None:
    """Bytes of host memory this runtime can still use (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def fits_in_memory(bytes_each: float, what: str = "images", share: float = 0.5) -> Rule:
    """Allow a count whose arrays, about ``bytes_each`` per item, take at most ``share`` of the
    host memory available now: a larger one would get the kernel killed (Colab: "Your session
    crashed after using all available RAM") instead of a clear line. The line says why."""

    def rule(name: str, value: object) -> object:
        free = available_memory()
        if free is None or not isinstance(value, int) or isinstance(value, bool):
            return value
        most = int(free * share / bytes_each)
        if value > most:
            raise invalid(name, value, f"at most {most:,} {what} on this runtime: they would "
                          f"take about {value * bytes_each / 2**30:.1f} GiB, and it has "
                          f"{free / 2**30:.1f} GiB of memory free (the kernel would be killed)")
        return value

    return rule
