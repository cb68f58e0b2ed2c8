"""Rules for papermill parameters: :func:`validate` raises a one-line :class:`ParameterError`."""

import contextlib
import difflib
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

from helpers import errors, workdirs
from helpers.errors import ParameterError, invalid

Rule = Callable[[str, object], object]
ACCELERATORS = ("auto", "cpu", "gpu", "tpu")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def one_of(*choices: object) -> Rule:
    """Allow exactly these values, of the same type (``1`` does not pass for ``True``)."""
    return check(lambda value: any(type(value) is type(c) and value == c for c in choices),
                 "allowed values are " + ", ".join(map(repr, choices)))


def integer(minimum: int, maximum: int | None = None) -> Rule:
    """Allow an integer (not a bool) from ``minimum`` to ``maximum`` (None: no upper bound)."""
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    return check(lambda v: _whole(v) and minimum <= v and (maximum is None or v <= maximum),
                 f"expected an integer {bounds}")


def number(minimum: float, maximum: float) -> Rule:
    """Allow a finite int or float from ``minimum`` to ``maximum``; returns it as a float."""
    allowed = f"expected a number from {minimum} to {maximum}"

    def rule(name: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid(name, value, allowed)
        finite = abs(value) <= sys.float_info.max and not math.isnan(value)  # 10**400: inf
        if not (finite and minimum <= value <= maximum):
            raise invalid(name, value, allowed + ("" if finite else " (a finite one)"))
        return float(value)

    return rule


def boolean() -> Rule:
    """Allow True or False only (papermill passes real booleans)."""
    return check(lambda value: isinstance(value, bool), "expected True or False")


def check(test: Callable[[object], bool], allowed: str) -> Rule:
    """Allow values for which ``test(value)`` is true; ``allowed`` says which."""
    def rule(name: str, value: object) -> object:
        if not test(value):
            raise invalid(name, value, allowed)
        return value

    return rule


def folder(inside: str | None = None) -> Rule:
    """Allow a work folder the notebook may empty; with ``inside``, strictly within that."""
    def rule(name: str, value: object) -> object:
        if not isinstance(value, str) or not value.strip() or "\0" in value:
            raise invalid(name, value, "expected a folder name; allowed: " + workdirs.ALLOWED)
        if '"' in value or not value.isprintable():  # the cells quote it in %%writefile "..."
            raise invalid(name, value, "expected a folder name without quotes or line breaks")
        if value.startswith("~"):  # Python does not expand it: it would make a folder named ~
            full = os.path.expanduser(value)
            raise invalid(name, value, "~ is not expanded here: give the full path"
                          + (f" ({full})" if full != value else ""))
        path = Path(value) if inside is None else Path(inside) / value
        if inside is not None and Path(inside).resolve() not in path.resolve().parents:
            raise workdirs.refuse(name, value, f"it is not a folder inside {inside}")
        if (why := workdirs.problem(path)) is not None:
            raise workdirs.refuse(name, value, why)
        return value

    return rule


def list_of(item: Rule, allowed: str) -> Rule:
    """Allow a non-empty list (or tuple), without repeats, whose items each pass ``item``."""
    def rule(name: str, value: object) -> object:
        if not isinstance(value, list | tuple) or not value:
            raise invalid(name, value, allowed)
        try:  # an item that fails (a list in the list too) names the whole list
            items = [item(name, each) for each in value]
        except ParameterError:
            raise invalid(name, value, allowed) from None
        if len(set(items)) != len(items):
            raise invalid(name, value, allowed + " (no repeats)")
        return items

    return rule


def enough_images(batch: object, batches: int = 2, name: str = "global_batch_size") -> Rule:
    """Allow at least ``batches`` batches of images (``batch``: the raw value of ``name``)."""
    def rule(label: str, value: object) -> object:
        least = batches * batch if _whole(batch) and batch >= 1 else 0
        if _whole(value) and value < least:
            what = "global batch" if name == "global_batch_size" else "batch"
            raise invalid(label, value, f"at least {batches} {what}{'es' * (batches > 1)} "
                          f"({least} images for {name}={batch})")
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
    """Check each ``name=(value, rule)``; the values as attributes (printed with ``echo``)."""
    errors.show_as_one_line()  # in IPython, what the rules raise shows as one line
    unknown_injected()
    values = {}
    for name, spec in specs.items():
        if not (isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1])):
            raise TypeError(f"validate({name}=...) takes a (value, rule) pair")
        values[name] = spec[1](name, spec[0])
    if echo:
        print("Parameters:", ", ".join(f"{name}={value!r}" for name, value in values.items()))
    return SimpleNamespace(**values)


def unknown_injected() -> None:
    """A one-line error for a name papermill injected that the typed cell before it lacks."""
    with contextlib.suppress(ImportError):
        from IPython import get_ipython

        shell = get_ipython()
        history = list(getattr(shell, "user_ns", {}).get("In", []))
        at = max((i for i, cell in enumerate(history) if cell.startswith("# Parameters\n")),
                 default=0)
        known = re.findall(r"(?m)^(\w+): ", history[at - 1]) if at else []
        for name in re.findall(r"(?m)^(\w+) = ", history[at]) if known else []:
            if name not in known:
                near = difflib.get_close_matches(name, known, 1)
                hint = f"the nearest is {near[0]}" if near else f"it has {', '.join(known)}"
                raise invalid(name, shell.user_ns.get(name),
                              f"this notebook has no parameter {name} ({hint})")


def proc_kib(path: str, key: str) -> int | None:
    """A ``key:`` figure of a /proc file (``MemAvailable``, ``VmRSS``) in KiB, or None."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(path) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def fits_in_memory(bytes_each: float) -> Rule:
    """Allow a count of images whose arrays take at most half the free memory (MemAvailable)."""
    def rule(name: str, value: object) -> object:
        free_kib = proc_kib("/proc/meminfo", "MemAvailable")
        if free_kib is None or not _whole(value):
            return value
        if value > (most := int(free_kib * 512 / bytes_each)):  # half of it, in bytes
            raise invalid(name, value, f"at most {most:,} images on this runtime: they would "
                          f"take about {value * bytes_each / 2**30:.1f} GiB, and it has "
                          f"{free_kib / 2**20:.1f} GiB of memory free (the kernel would be killed)")
        return value

    return rule
