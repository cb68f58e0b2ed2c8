"""Every notebook's setup, on the runtimes learners meet: the install cell with and without the
course's ``helpers`` (pip faked: failing, installing, or changing nothing), with v0.1.0 installed
(a package and its metadata), with another module named ``helpers`` in the way, and the setup
cells on a runtime without TensorFlow (Colab's TPU runtimes).

Each case runs the notebooks' own cells in a fresh kernel, as Colab does; ``sitecustomize`` files
on ``PYTHONPATH`` shape what that kernel can import.
"""

import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import textwrap
import tomllib

import pytest

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

# The course's helpers not installed: drop the editable install's finder, its metadata and any
# path entry holding a helpers package; $FAKE_SITE stands in for site-packages, last on the path
# (after the kernel's working directory, as on Colab).
NO_COURSE_HELPERS = """
import importlib.machinery
import os
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if not os.path.exists(os.path.join(p, "helpers"))]
sys.path.append(os.environ["FAKE_SITE"])
find = importlib.machinery.PathFinder.find_distributions


def find_distributions(*args, **kwargs):  # the course's metadata: only $FAKE_SITE's
    for found in find(*args, **kwargs):
        site = str(found.locate_file(""))
        if found.name != "fast-tf-course-helpers" or site == os.environ["FAKE_SITE"]:
            yield found


importlib.machinery.PathFinder.find_distributions = find_distributions
"""

# `python -m pip` finds this first: it logs its arguments, then prints $FAKE_PIP_OUTPUT and fails
# as pip does, or changes nothing though it exits 0 (installed where this kernel does not look),
# or "installs" the course's package and its metadata into $FAKE_SITE, replacing another release.
FAKE_PIP = """
import os
import pathlib
import shutil
import sys

with open(os.environ["FAKE_PIP_LOG"], "a") as log:  # one line per call
    log.write(" ".join(sys.argv[1:]) + "\\n")
print(os.environ.get("FAKE_PIP_OUTPUT", ""), file=sys.stderr)
if os.environ["FAKE_PIP"] == "fail":
    sys.exit(1)
site, version = pathlib.Path(os.environ["FAKE_SITE"]), os.environ["FAKE_PIP_VERSION"]
if os.environ["FAKE_PIP"] == "install":
    for old in site.glob("fast_tf_course_helpers-*.dist-info"):
        shutil.rmtree(old)
    (site / "helpers").mkdir(exist_ok=True)
    (site / "helpers" / "__init__.py").write_text(f'__version__ = "{version}"\\n'
                                                  'DISTRIBUTION = "fast-tf-course-helpers"\\n')
    info = site / f"fast_tf_course_helpers-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Name: fast-tf-course-helpers\\nVersion: {version}\\n")
"""

CONFLICT = ("ERROR: Cannot install fast-tf-course-helpers==0.1.0 and numpy==1.0 because these "
            "package versions have conflicting dependencies.")
#: What pip 24 prints when it cannot install the course (the first three seen here), and the
#: one line the install cell must stop with: each says a different thing.
PIP_FAILURES = {
    "no-network": ("""\
  error: subprocess-exited-with-error

  × git clone --filter=blob:none --quiet https://github.com/a/b.git /tmp/x did not run successfully.
  │ exit code: 128
  ╰─> [1 lines of output]
      fatal: unable to access 'https://github.com/a/b.git/': Could not resolve host: github.com
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error
""", "fatal: unable to access 'https://github.com/a/b.git/': Could not resolve host: github.com"),
    "bad-tag": ("""\
  WARNING: Did not find branch or tag 'v9.9.9', assuming revision or ref.
  error: subprocess-exited-with-error

  × git checkout -q v9.9.9 did not run successfully.
  │ exit code: 1
  ╰─> [1 lines of output]
      error: pathspec 'v9.9.9' did not match any file(s) known to git
      [end of output]
""", "error: pathspec 'v9.9.9' did not match any file(s) known to git"),
    "no-git": ("""\
  ERROR: Error [Errno 2] No such file or directory: 'git' while executing command git version
ERROR: Cannot find command 'git' - do you have 'git' installed and in your PATH?
""", "ERROR: Error [Errno 2] No such file or directory: 'git' while executing command git version"),
    "resolver-conflict": (f"""\
{CONFLICT}

The conflict is caused by:
    The user requested numpy==1.0
    fast-tf-course-helpers 0.1.0 depends on numpy>=1.23

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-res
""", CONFLICT),
}

#: pip's notice after a successful install where the runtime already had a conflict: not a failure
PIP_NOTICE = ("ERROR: pip's dependency resolver does not currently take into account all the "
              "packages that are installed. This behaviour is the source of the following "
              """dependency conflicts.
tensorflow 2.20.0 requires keras>=3.10.0, but you have keras 3.9.0 which is incompatible.
""")


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
    env = {"FAKE_PIP_LOG": str(tmp_path / "pip.log"), "FAKE_SITE": str(site),
           "FAKE_PIP_VERSION": helpers.__version__}
    return folder, site, env


def test_helpers_version_is_the_installed_distributions_which_the_install_cell_checks():
    """One source: pyproject.toml's version, as pip's metadata records it on install."""
    with open(course.ROOT / "pyproject.toml", "rb") as f:
        assert tomllib.load(f)["project"]["name"] == helpers.DISTRIBUTION
    assert importlib.metadata.distribution(helpers.DISTRIBUTION).name == helpers.DISTRIBUTION
    assert helpers.__version__ == importlib.metadata.version(helpers.DISTRIBUTION)
    assert helpers.__version__ == course.version(), "installed from this pyproject.toml"
    assert f'release = "{helpers.__version__}"' in INSTALL
    assert f'distributions(name="{helpers.DISTRIBUTION}")' in INSTALL
    assert '__version__ = "' not in open(helpers.__file__).read(), "no second copy of it"
    marker = re.search(r'"([^"]+)" not in open', INSTALL)[1]
    assert helpers.DISTRIBUTION.startswith(marker) and marker in open(helpers.__file__).read()


def test_every_notebook_starts_with_the_install_cell():
    """...or, in a TPU notebook, with the cell that chooses the engine, then the install cell:
    a Colab form of plain statements (one per line), whose input the course site leaves out."""
    for path in NOTEBOOKS:
        first = 1 if path.stem in course.TPU_NOTEBOOKS else 0
        assert setup_sources(path)[first] == INSTALL, path.name
        if first:
            assert "os.environ[" in setup_sources(path)[0], path.name
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        assert cells[first]["metadata"] == course.INSTALL_METADATA, path.name
    assert INSTALL.startswith("#@title ") and len(INSTALL.splitlines()) < 30
    assert ";" not in INSTALL and ":=" not in INSTALL, "one plain statement per line"
    assert '{ display-mode: "form" }' in INSTALL.splitlines()[0]


def test_install_cell_skips_pip_where_the_course_helpers_are_installed(tmp_path, fake_pip):
    folder, _, env = fake_pip
    results = run_cells([INSTALL, "import helpers; print(helpers.DISTRIBUTION)"], tmp_path,
                        {**env, "FAKE_PIP": "fail", **python_path(folder)})
    assert [r["status"] for r in results] == ["ok", "ok"], results
    assert not (tmp_path / "pip.log").exists(), "pip ran although helpers were installed"


@pytest.mark.parametrize("notice", [False, True], ids=["quiet", "pip-notice"])
def test_install_cell_installs_the_helpers_where_missing(tmp_path, fake_pip, notice):
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    check = f"import helpers; assert helpers.__file__.startswith({str(site)!r}), helpers.__file__"
    results = run_cells([INSTALL, check], tmp_path, {
        **env, "FAKE_PIP": "install", "FAKE_PIP_OUTPUT": PIP_NOTICE if notice else "",
        **python_path(folder)})
    assert [r["status"] for r in results] == ["ok", "ok"], results
    url = course.install_url(**course.settings())
    assert (tmp_path / "pip.log").read_text() == f"install {url}\n", "pip got the release"


def test_pip_changes_no_package_the_runtime_has():
    """The install cell lets pip resolve helpers' dependencies; none names a version, so pip
    installs only those the runtime lacks and keeps Colab's numpy, matplotlib... as they are."""
    with open(course.ROOT / "pyproject.toml", "rb") as f:
        names = tomllib.load(f)["project"]["dependencies"]
    assert names and all(re.fullmatch(r"[A-Za-z0-9_.-]+", name) for name in names)


@pytest.mark.parametrize("case", PIP_FAILURES, ids=list(PIP_FAILURES))
def test_a_failing_install_stops_in_one_line_with_pips_reason(tmp_path, fake_pip, case):
    folder, _, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    output, reason = PIP_FAILURES[case]
    [result] = run_cells([INSTALL], tmp_path, {
        **env, "FAKE_PIP": "fail", "FAKE_PIP_OUTPUT": output, **python_path(folder)})
    assert (tmp_path / "pip.log").exists(), "pip never ran"
    assert result["status"] == "error" and result["traceback"] == []
    assert result["stderr"] == f"UsageError: {reason}\n", result
    assert len({reason for _, reason in PIP_FAILURES.values()}) == len(PIP_FAILURES)


def test_another_helpers_in_the_way_is_named_in_one_line(tmp_path, fake_pip):
    """A learner's own helpers.py beside the notebook comes first on the path: the cell stops
    at once, naming it, rather than install a package that module would hide."""
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    foreign = write(tmp_path, "helpers.py", "def plot(): ...\n")
    [result] = run_cells([INSTALL], tmp_path,
                         {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert result["status"] == "error" and result["traceback"] == [], result
    assert result["stderr"] == f"UsageError: {foreign} hides the course's helpers\n"
    assert not (tmp_path / "pip.log").exists()


OLD_RELEASE = '__version__ = "0.1.0"\nDISTRIBUTION = "fast-tf-course-helpers"\n'


def install_old_release(site):
    """v0.1.0 as pip left it in ``site``: its package (which named its version) and metadata."""
    write(site, "fast_tf_course_helpers-0.1.0.dist-info/METADATA",
          "Name: fast-tf-course-helpers\nVersion: 0.1.0\n")
    return write(site, "helpers/__init__.py", OLD_RELEASE)


def test_an_older_release_of_the_helpers_is_replaced_by_this_notebooks(tmp_path, fake_pip):
    """A runtime that kept v0.1.0 (a Kaggle session, a local Jupyter): pip installs this one."""
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    install_old_release(site)
    version = helpers.__version__
    check = ("import helpers, importlib.metadata; "
             f"assert helpers.__version__ == {version!r}; "
             f"assert importlib.metadata.version('fast-tf-course-helpers') == {version!r}")
    results = run_cells([INSTALL, check], tmp_path,
                        {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert [r["status"] for r in results] == ["ok", "ok"], results
    url = course.install_url(**course.settings())
    assert (tmp_path / "pip.log").read_text() == f"install {url}\n", "pip got this release"


def stop_line(path, found: str) -> str:
    """What the install cell says where ``import helpers`` still finds release ``found``."""
    url = course.install_url(**course.settings())
    return (f"UsageError: {path} is helpers {found}, this notebook needs {course.version()}: "
            f"remove it or run %pip install {url}, then restart the runtime\n")


def test_an_older_release_pip_did_not_replace_stops_naming_both_versions(tmp_path, fake_pip):
    """pip exits 0 but this kernel still finds v0.1.0 (pip installed where it does not look)."""
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    old = install_old_release(site)
    [result] = run_cells([INSTALL], tmp_path, {**env, "FAKE_PIP": "nothing", **python_path(folder)})
    assert (tmp_path / "pip.log").exists(), "pip never ran"
    assert result["status"] == "error" and result["traceback"] == [], result
    assert result["stderr"] == stop_line(old, "0.1.0")


def test_an_older_release_first_on_the_path_is_named_in_one_line(tmp_path, fake_pip):
    """v0.1.0's helpers beside the notebook (an old clone) would hide what pip installs."""
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    old = write(tmp_path, "helpers/__init__.py", OLD_RELEASE)
    [result] = run_cells([INSTALL], tmp_path, {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert result["status"] == "error" and result["traceback"] == [], result
    assert result["stderr"] == stop_line(old, "0.1.0")


def test_an_older_release_already_imported_asks_for_a_restart(tmp_path, fake_pip):
    """pip would replace its files, but the kernel keeps the modules it imported."""
    folder, site, env = fake_pip
    write(folder, "sitecustomize.py", NO_COURSE_HELPERS)
    old = install_old_release(site)
    results = run_cells(["import helpers", INSTALL], tmp_path,
                        {**env, "FAKE_PIP": "install", **python_path(folder)})
    assert results[1]["status"] == "error" and results[1]["traceback"] == [], results
    assert results[1]["stderr"] == (
        f"UsageError: This kernel imported {old}: restart the runtime first\n")
    assert not (tmp_path / "pip.log").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_setup_without_tensorflow_stops_in_one_line(tmp_path, path):
    """On a runtime without TensorFlow the setup of each notebook stops with one line that says
    what to do; the notebooks listed in helpers.logs.RUN_WITHOUT_TENSORFLOW run their setup."""
    if path.stem in logs.RUN_WITHOUT_TENSORFLOW and not course.runs_here(path.stem):
        engine = ", ".join(course.TPU_NOTEBOOKS.get(path.stem, ("tensorflow",)))
        pytest.skip(f"{path.stem}'s engine ({engine}) is not "
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
    message = logs.no_tensorflow_message()
    names = " or ".join(f"notebooks/{name}.ipynb" for name in logs.RUN_WITHOUT_TENSORFLOW)
    assert message.endswith(f", or open {names}, which run here.")
    assert "\n" not in message
