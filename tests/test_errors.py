"""The layout of helpers: errors in one place, shown as one line; no private imports across
modules; one precision module; every classifier in helpers.models."""

import ast
import inspect
import subprocess
import sys
from pathlib import Path

from helpers import devices, errors, models, params

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
ROOT = HELPERS.parent


def modules(*folders):
    """The modules of ``folders``; helpers' own, not helpers/lessons (copies of notebook cells,
    which are the lessons' code, not plumbing)."""
    for folder in folders:
        yield from sorted(p for p in (ROOT / folder).rglob("*.py")
                          if ROOT / "helpers" / "lessons" not in p.parents)


def test_every_error_class_lives_in_helpers_errors():
    """Every error class, ParameterError included, is defined in helpers.errors."""
    elsewhere = []
    for path in modules("helpers"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                (getattr(b, "id", None) or getattr(b, "attr", "")).endswith(
                    ("Error", "Exception", "Exceeded", "Unavailable", "Died", "Timeout",
                     "OutOfMemory")
                )
                for b in node.bases
            ):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert sorted(elsewhere) == ["helpers/errors.py:" + n for n in sorted(
        name for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException)
    )]


def test_every_course_error_is_shown_as_one_line():
    defined = {obj for obj in vars(errors).values()
               if inspect.isclass(obj) and issubclass(obj, BaseException)}
    assert defined == set(errors.ONE_LINE_ERRORS)
    assert params.ParameterError is errors.ParameterError
    error = errors.LateConfigurationError(errors.too_late("a 512 MiB limit", "growth is on"))
    shown = []

    class Shell:
        def _showtraceback(self, etype, value, stb):
            shown.extend(stb)

    lines = errors._one_line(Shell(), type(error), error, None)
    assert lines == shown == [f"LateConfigurationError: {error}"]
    assert "\n" not in lines[0]


def test_the_too_late_text_is_written_once():
    """Each "too late" error is built by errors.too_late; its advice is in errors.py only."""
    assert errors.too_late("x", "y").startswith("Asked for x, but y. TensorFlow applies")
    for path in modules("helpers"):
        if path.name == "errors.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "Restart the kernel" not in text and "Restart session" not in text, path


def test_no_private_names_are_imported_across_modules():
    found = []
    for path in modules("helpers", "tools"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("helpers", "tools")
            ):
                found += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert found == []


def test_the_classifiers_live_in_helpers_models():
    assert callable(models.replica_classifier) and callable(models.scoring_classifier)
    defining = [p.name for p in modules("helpers")
                if "def replica_classifier" in p.read_text(encoding="utf-8")
                or "def scoring_classifier" in p.read_text(encoding="utf-8")
                or "\ndef classifier(" in p.read_text(encoding="utf-8")]
    assert defining == ["models.py"]


def test_the_precision_policy_is_defined_once():
    assert devices.mixed_policy_for("gpu") == "mixed_float16"
    defining = [p.name for p in modules("helpers")
                if "def mixed_policy_for(" in p.read_text(encoding="utf-8")]
    assert defining == ["devices.py"]


def test_every_parameter_error_is_built_by_errors_invalid():
    """One way to build a parameter error: the "Invalid parameter" text is in errors.py only."""
    assert str(errors.invalid("epochs", 0, "allowed: 1 or more.")) == (
        "Invalid parameter epochs=0: allowed: 1 or more.")
    for path in modules("helpers"):
        if path.name != "errors.py":
            assert "Invalid parameter" not in path.read_text(encoding="utf-8"), path


def test_importing_helpers_changes_nothing_in_ipython():
    """No import-time side effect: the one-line display is installed by validate, not import."""
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "shell = InteractiveShell.instance()\n"
            "import helpers.params, helpers.workdirs, helpers.data\n"
            "print(shell.custom_exceptions)\n"
            "helpers.params.validate(echo=False)\nprint(len(shell.custom_exceptions))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.split()
    assert before == "()" and int(after) == len(errors.ONE_LINE_ERRORS)
