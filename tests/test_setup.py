"""Every notebook's setup, on the runtimes learners meet: the install cell with and without the
course's ``helpers`` (pip faked: failing, or installing), with another module named ``helpers``
in the way, and the setup cells on a runtime without TensorFlow (Colab's TPU runtimes).

Each case runs the notebooks' own cells in a fresh kernel, as Colab does; ``sitecustomize`` files
on ``PYTHONPATH`` shape what that kernel can import.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys
import textwrap

import pytest
import tomllib

import helpers
from helpers import errors, logs
from tools import course

NOTEBOOKS = course.notebook_paths()
INSTALL = course.install_cell(**course.settings())

NO_TENSORFLOW = """
import sys


class NoTensorFlow:  # what `import tensorflow` gives on a runtime without it
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoTensorFlow())
"""

# The course's helpers not installed: drop the editable install's finder and any path entry
# holding a helpers package; $FAKE_SITE stands in for site-packages, last on the path (after
# the kernel's working directory, as on Colab).
NO_COURSE_HELPERS = """
import os
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if not os.path.exists(os.path.join(p, "helpers"))]
sys.path.append(os.environ["FAKE_SITE"])
"""

# `python -m pip` finds this first: it logs its arguments, then fails as pip does offline, or
# "installs" a package that names the course's distribution into $FAKE_SITE.
FAKE_PIP = """
import os
import pathlib
import sys

with open(os.environ["FAKE_PIP_LOG"], "a") as log:  # one line per call
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ["FAKE_PIP"] == "fail":
    print("  fatal: unable to access Could not resolve host", file=sys.stderr)
    sys.exit(1)
if "--no-deps" not in sys.argv:  # a dependency: nothing to fake
    sys.exit(0)
package = pathlib.Path(os.environ["FAKE_SITE"]) / "helpers"
package.mkdir()
(package / "__init__.py").write_text('DISTRIBUTION = "fast-tf-course-helpers"\\n')
"""


def run_cells(sources: list[str], cwd, env: dict) -> list[dict]:
    """Run ``sources`` in one fresh kernel, stopping at the first that fails. Per cell: its
    reply ``status``, the ``error`` line (``ename: evalue``) and ``traceback`` a learner sees,
    and its ``stderr``."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(
        kernel_name="python3",
        cwd=str(cwd),
        env={**os.environ, **env},
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    results = []
    try:
        for source in sources:
            seen = {"error": "", "traceback": [], "stderr": ""}

            def hook(message, seen=seen):
                content = message["content"]
                if message["msg_type"] == "error":
                    seen["error"] = f"{content['ename']}: {content['evalue']}"
                    seen["traceback"] = content["traceback"]
                elif message["msg_type"] == "stream" and content["name"] == "stderr":
                    seen["stderr"] += content["text"]

            reply = client.execute_interactive(source, output_hook=hook, timeout=120)
            results.append({"status": reply["content"]["status"], **seen})
            if reply["content"]["status"] != "ok":
                break
        return results
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def python_path(*folders) -> dict:
    """``PYTHONPATH`` with ``folders`` first, keeping what was there."""
    kept = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), *kept])}


def write(folder, name: str, text: str):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def setup_sources(path) -> list[str]:
    """The notebook's setup: its code cells before the ``parameters`` cell."""
    cells = json.loads(path.read_text())["cells"]
    tagged = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    return ["".join(c["source"]) for c in cells[:tagged] if c["cell_type"] == "code"]


@pytest.fixture
def fake_pip(tmp_path):
    """A folder for ``PYTHONPATH`` whose ``pip`` is :data:`FAKE_PIP`, and its environment."""
    folder, site = tmp_path / "fake", tmp_path / "site"
    write(folder, "pip/__init__.py", "")
    write(folder, "pip/__main__.py", FAKE_PIP)
    site.mkdir()
    env = {"FAKE_PIP_LOG": str(tmp_path / "pip.log"), "FAKE_SITE": str(site)}
    return folder, site, env


def test_helpers_names_the_distribution_the_install_cell_looks_for():
    with open(course.ROOT / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["name"] == helpers.DISTRIBUTION
    assert importlib.metadata.distribution(helpers.DISTRIBUTION).name == helpers.DISTRIBUTION
    assert f'"{helpers.DISTRIBUTION}" in open(spec.origin)' in INSTALL


def test_every_notebook_starts_with_the_install_cell():
    """...or, in a TPU notebook, with the cell that chooses the engine, then the install cell."""
    for path in NOTEBOOKS:
        first = 1 if path.stem in course.TPU_NOTEBOOKS else 0
        assert setup_sources(path)[first] == INSTALL, path.name
        if first:
            assert "os.environ[" in setup_sources(path)[0], path.name
    assert len(INSTALL.splitlines()) <= 22  # it keeps the runtime's packages: a few lines more


def test_install_cell_skips_pip_where_the_course_helpers_are_installed(tmp_path, fake_pip):
    folder, _, env = fake_pip
    results = run_cells([INSTALL, "import helpers; print(helpers.DISTRIBUTION)"], tmp_path,
                        {**env, "FAKE_PIP": "fail", **python_path(folder)})
    assert [r["status"] for r in results] == ["ok", "ok"], results
    assert not (tmp_path / "pip.log").exists(), "pip ran although helpers were installed"


def test_install_cell_installs_the_helpers_where_missing(tmp_path, fake_pip):
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    check = f"import helpers; assert helpers.__file__.startswith({str(site)!r}), helpers.__file__"
    results = run_cells([INSTALL, check], tmp_path,
                        {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert [r["status"] for r in results] == ["ok", "ok"], results
    url = course.install_url(**course.settings())
    assert (tmp_path / "pip.log").read_text() == f"install -q --no-deps {url}\n", (
        "pip got the course's release, and kept every package the runtime has")


def test_install_cell_installs_only_the_dependencies_the_runtime_lacks(tmp_path, fake_pip):
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS + 'sys.modules["tqdm"] = None\n')
    results = run_cells([INSTALL], tmp_path, {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert [r["status"] for r in results] == ["ok"], results
    url = course.install_url(**course.settings())
    calls = (tmp_path / "pip.log").read_text().splitlines()
    assert calls == ["install -q tqdm", f"install -q --no-deps {url}"]


@pytest.mark.parametrize("foreign", [False, True], ids=["missing", "another-helpers"])
def test_a_failing_install_says_so_in_one_line_with_the_fix(tmp_path, fake_pip, foreign):
    folder, _, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    if foreign:  # a learner's own helpers.py beside the notebook must not skip the install
        write(tmp_path, "helpers.py", "def plot(): ...\n")
    [result] = run_cells([INSTALL], tmp_path, {**env, "FAKE_PIP": "fail", **python_path(folder)})
    assert (tmp_path / "pip.log").exists(), "pip never ran"
    assert result["status"] == "error" and result["traceback"] == []
    line = f"UsageError: pip could not install {course.install_url(**course.settings())}: "
    assert result["stderr"].startswith(line) and result["stderr"].count("\n") == 1, result
    assert "`make set-repo`" in result["stderr"] and "no network" in result["stderr"]


def test_another_helpers_in_the_way_of_the_installed_one_is_named(tmp_path, fake_pip):
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    foreign = write(tmp_path, "helpers.py", "def plot(): ...\n")
    [result] = run_cells([INSTALL], tmp_path,
                         {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert result["status"] == "error", result
    assert result["stderr"] == f"UsageError: {foreign} hides the course's helpers\n"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_setup_without_tensorflow_stops_in_one_line(tmp_path, path):
    """On a runtime without TensorFlow the setup of each notebook stops with one line that says
    what to do; the notebooks listed in helpers.logs.RUN_WITHOUT_TENSORFLOW run their setup."""
    if path.stem in logs.RUN_WITHOUT_TENSORFLOW and not course.runs_here(path.stem):
        pytest.skip(f"{path.stem}'s engine ({', '.join(course.needs(path.stem))}) is not "
                    "installed here: make tpu-unit runs this on the TPU stack")

    if importlib.util.find_spec("tensorflow") is not None:  # else this is such a runtime
        write(tmp_path / "block", "sitecustomize.py", NO_TENSORFLOW)
    sources = setup_sources(path)
    results = run_cells(sources, tmp_path, python_path(tmp_path / "block"))
    if path.stem in logs.RUN_WITHOUT_TENSORFLOW:
        assert [r["status"] for r in results] == ["ok"] * len(sources), results
        return
    assert [r["status"] for r in results] == ["ok"] * (len(sources) - 1) + ["error"], results
    error = results[-1]
    assert error["error"] == f"NoTensorFlowError: {logs.no_tensorflow_message()}"
    assert error["traceback"] == [error["error"]], "one line, not a traceback"
    assert "Traceback" not in error["stderr"] and "ModuleNotFoundError" not in error["stderr"]


def test_import_tensorflow_without_tensorflow_raises_the_one_line_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # restored after the test
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name)
    )
    with pytest.raises(errors.NoTensorFlowError, match="Change runtime type") as caught:
        logs.import_tensorflow()
    assert isinstance(caught.value, ImportError) and caught.value.name == "tensorflow"
    assert errors.NoTensorFlowError in errors.ONE_LINE_ERRORS


def test_the_message_points_at_the_notebooks_that_run_without_tensorflow():
    assert "notebooks/05_x.ipynb, which runs here" in logs.no_tensorflow_message(("05_x",))
    assert "open" not in logs.no_tensorflow_message(())
    assert "\n" not in logs.no_tensorflow_message(("05_x",))
