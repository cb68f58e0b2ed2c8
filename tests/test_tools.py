"""The maintainer tools: notebook cleaning, the conventions check, the runner's readers."""

import json
import re

import nbformat
import pytest
from click.testing import CliRunner

from tools import check, compat, course, lessons, nbcheck, nbclean, run_notebooks, set_repo

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools

CONF = {"repository": "me/course", "ref": "v1.0"}
NAME = "10_example.ipynb"
URL = course.colab_url(NAME, **CONF)


def make_notebook(**changes):
    """A small notebook that follows every convention; ``changes`` break one."""
    cells = {
        "title": nbformat.v4.new_markdown_cell("# Example"),
        "badge": nbformat.v4.new_markdown_cell(
            f"[![Open In Colab](colab-badge.svg)]({URL})\n\n**Prerequisites:** 01 and 02.\n\n"
            "You will:\n\n- learn one thing;\n- and another."
        ),
        "setup": nbformat.v4.new_markdown_cell("## Setup"),
        "install": nbformat.v4.new_code_cell(course.install_cell(**CONF)),
        "imports": nbformat.v4.new_code_cell(
            "from helpers import example\nfrom helpers.display import Table"),
        "params": nbformat.v4.new_code_cell(
            "epochs: int = 3  # epochs in all\nbatch_size: int = 8  # images per step"
        ),
        "validate": nbformat.v4.new_code_cell(
            "params = example.check_parameters(epochs=epochs, batch_size=batch_size)"
        ),
        "exercises": nbformat.v4.new_markdown_cell("## Exercises"),
        "elapsed": nbformat.v4.new_code_cell('print(f"This run took {elapsed:.0f} s")'),
        "reading": nbformat.v4.new_markdown_cell("## Further reading"),
        "summary": nbformat.v4.new_markdown_cell("## Summary\n\n## Next steps"),
    }
    cells["params"].metadata["tags"] = ["parameters"]
    cells.update(changes)
    nb = nbformat.v4.new_notebook(cells=[c for c in cells.values() if c is not None])
    nb.metadata = {"kernelspec": nbclean.KERNELSPEC, "language_info": {"name": "python"}}
    return nbclean.clean(json.loads(nbformat.writes(nb)), NAME, **CONF)


def params(text):
    """A change that writes the parameters cell as ``text``."""
    cell = nbformat.v4.new_code_cell(text)
    cell.metadata["tags"] = ["parameters"]
    return {"params": cell}


PROFILES = {
    "test": {"10_example": {"epochs": 1}},
    "invalid": {"10_example": {"epochs": [-1], "batch_size": [0]}},
}


def problems(nb, profiles=PROFILES):
    return nbcheck.check_notebook(course.NOTEBOOKS / NAME, nbclean.dumps(nb), CONF, profiles)


def test_a_conforming_notebook_passes():
    assert problems(make_notebook()) == []


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"title": nbformat.v4.new_markdown_cell("Example")}, "H1 title"),
        ({"badge": nbformat.v4.new_markdown_cell("no badge")}, "Open in Colab"),
        ({"setup": None}, "'## Setup'"),
        ({"summary": nbformat.v4.new_markdown_cell("## Summary")}, "'## Next steps'"),
        ({"validate": nbformat.v4.new_code_cell("print(epochs)")}, "must be one call"),
        ({"validate": nbformat.v4.new_code_cell(
            "params = validate(epochs=(epochs, integer(1)))")}, "must be one call"),
        ({"validate": nbformat.v4.new_code_cell(
            "params = example.check_parameters(epochs=epochs, batch_size=8)")},
         "not validated: batch_size"),
        ({"extra": nbformat.v4.new_code_cell("from helpers.params import integer")},
         "imports helpers.params"),
        ({"imports": nbformat.v4.new_code_cell(
            "import helpers\nfrom helpers import data\nfrom helpers.display import Table")},
         "imports helpers 3 times"),
        ({"extra": nbformat.v4.new_code_cell("\n".join(["x = 1"] * 26))}, "has 26 lines"),
        (params("epochs = 3  # no type\nbatch_size: int = 8  # images"), "cannot read epochs"),
        ({"extra": nbformat.v4.new_code_cell("import os  # noqa: F401")}, "harness markers"),
        ({"extra": nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nx = 1")}, "harness markers"),
        (params("epochs: int = 3  # at most (<= 9)\nbatch_size: int = 8  # x"), "read epochs"),
        (params("epochs: int = 3\nbatch_size: int = 8  # images per step"), "read epochs"),
        ({"install": nbformat.v4.new_code_cell("%pip install helpers")}, "the install cell"),
        ({"install": None}, "the install cell"),
        ({"exercises": None}, "'## Exercises'"),
        ({"reading": None}, "'## Further reading'"),
        ({"elapsed": None}, "how long the run took"),
        ({"badge": nbformat.v4.new_markdown_cell(f"({URL}) colab-badge You will:\n\n- x")},
         "prerequisites"),
        ({"badge": nbformat.v4.new_markdown_cell(f"({URL}) colab-badge\n**Prerequisites:** 01")},
         "what the reader will learn"),
        ({"badge": nbformat.v4.new_markdown_cell(
            f"({URL}) colab-badge\n**Prerequisites:** 01 and 10\n\nYou will:\n\n- x")},
         "earlier notebooks only, not ['10']"),
    ],
)
def test_each_broken_convention_is_reported(change, expected):
    found = problems(make_notebook(**change))
    assert any(expected in p for p in found), found


def test_parameters_tag_must_be_unique():
    second = nbformat.v4.new_code_cell("x = 1")
    second.metadata["tags"] = ["parameters"]
    assert any("exactly one" in p for p in problems(make_notebook(extra=second)))


def test_every_parameter_needs_an_invalid_value_and_a_test_profile():
    found = problems(make_notebook(), {"invalid": {"10_example": {"epochs": [-1]}}})
    assert any("[invalid.10_example] for: batch_size" in p for p in found)
    assert any("no [test.10_example]" in p for p in found)


def test_a_stored_output_is_not_clean():
    nb = make_notebook()
    nb["cells"][3]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["3\n"]}]
    nb["cells"][3]["execution_count"] = 4
    assert any("not stored clean" in p for p in problems(nb))
    cleaned = nbclean.clean(nb, NAME, **CONF)
    assert cleaned["cells"][3]["outputs"] == [] and cleaned["cells"][3]["execution_count"] is None


def test_clean_rewrites_badge_and_install_urls_from_the_setting():
    nb = make_notebook()
    nb["cells"][2]["source"] = ['%pip install "git+https://github.com/old/place.git@dev"']
    cleaned = nbclean.clean(nb, NAME, repository="new/home", ref="v2")
    text = nbclean.dumps(cleaned)
    assert (
        "https://colab.research.google.com/github/new/home/blob/v2/notebooks/10_example.ipynb"
        in text
    )
    assert "git+https://github.com/new/home.git@v2" in text and "old/place" not in text


def test_clean_writes_the_install_cell_as_tools_course_has_it():
    old = 'if find_spec("helpers") is None:\n    %pip install "git+https://github.com/a/b.git@dev"'
    nb = make_notebook(install=nbformat.v4.new_code_cell(old))
    cleaned = nbclean.clean(nb, NAME, repository="new/home", ref="v2")
    install = next(c for c in cleaned["cells"] if c["cell_type"] == "code")
    assert "".join(install["source"]) == course.install_cell("new/home", "v2")
    assert install["metadata"] == course.INSTALL_METADATA  # a form; no input on the site
    assert 'url = "git+https://github.com/new/home.git@v2"\n' in install_cell_of("new/home")
    longest = course.install_cell("an-organisation-with-a-long-name/fast-tf-course-fork",
                                  "0123456789abcdef0123456789abcdef01234567")
    assert max(map(len, longest.splitlines())) <= 100, "ruff's line length, after `make set-repo`"
    command = longest.split("url = (")[1].split(")")[0]  # the split URL, rejoined
    pieces = re.findall(r'"([^"]*)"', command)
    assert "".join(pieces) == course.install_url(
        "an-organisation-with-a-long-name/fast-tf-course-fork",
        "0123456789abcdef0123456789abcdef01234567")


def install_cell_of(repository: str) -> str:
    return course.install_cell(repository, "v2")


def test_clean_folds_the_validation_cell_away_and_only_that_cell():
    """A collapsed form on Colab (``#@title`` line, ``cellView``), hidden source in Jupyter;
    cleaning twice changes nothing, and other cells keep only what they had."""
    nb = make_notebook()
    validation = nb["cells"][6]
    assert validation["source"][0] == nbclean.VALIDATION_TITLE + "\n"
    assert "".join(validation["source"][1:]).startswith("params = example.check_parameters(")
    assert validation["metadata"] == {"cellView": "form", "jupyter": {"source_hidden": True}}
    install = [i for i, c in enumerate(nb["cells"]) if c["metadata"] == course.INSTALL_METADATA]
    assert all("cellView" not in c["metadata"] for i, c in enumerate(nb["cells"])
               if i != 6 and i not in install) and len(install) == 1
    assert nbclean.dumps(nbclean.clean(nb, NAME, **CONF)) == nbclean.dumps(nb)
    hidden = nbformat.v4.new_code_cell("x = 1")
    hidden.metadata["jupyter"] = {"source_hidden": True, "outputs_hidden": False}
    hidden.metadata["collapsed"] = True
    kept = make_notebook(extra=hidden)["cells"][-1]
    assert kept["metadata"] == {"jupyter": {"source_hidden": True}}


def test_another_title_on_the_validation_cell_is_replaced_not_doubled():
    cell = nbformat.v4.new_code_cell("#@title Validate\nparams = example.check_parameters("
                                     "epochs=epochs, batch_size=batch_size)")
    source = "".join(make_notebook(validate=cell)["cells"][6]["source"])
    assert source.splitlines()[0] == nbclean.VALIDATION_TITLE and source.count("#@title") == 1


@pytest.mark.parametrize("broken", ["title", "metadata"])
def test_a_validation_cell_that_is_not_folded_away_is_reported(broken):
    nb = make_notebook()
    validation = nb["cells"][6]
    if broken == "title":
        validation["source"] = validation["source"][1:]
        expected = "first line must be #@title"
    else:
        validation["metadata"] = {}
        expected = "metadata must include"
    assert any(expected in p for p in problems(nb)), problems(nb)


def test_set_repo_rewrites_only_the_course_section():
    text = (
        '[project]\nname = "x"\n\n[tool.course]\nrepository = "a/b"\nrelease = "v0.1.0"\n'
        "\n[x]\ny = 1\n"
    )
    out = set_repo.set_repo(text, "me/course", "v0.2.0")
    assert 'repository = "me/course"' in out and 'release = "v0.2.0"' in out and "[x]\ny = 1" in out
    commit = "6fd9e8a0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6"
    assert f'release = "{commit}"' in set_repo.set_repo(text, "me/course", commit)
    with pytest.raises(ValueError, match="owner/name"):
        set_repo.set_repo(text, "not a repo", "v1")


@pytest.mark.parametrize("ref", ["main", "master", "dev", "feature/x", "latest", "v1.x"])
def test_installs_never_name_a_branch(ref):
    """A branch moves: whoever pushes to it would run code in every learner's kernel."""
    text = '[tool.course]\nrepository = "a/b"\nrelease = "v0.1.0"\n'
    with pytest.raises(ValueError, match=f"REF={ref!r} is not a release: name a tag"):
        set_repo.set_repo(text, "me/course", ref)
    assert course.release_problem(ref) is not None


def test_the_committed_release_is_a_tag_or_commit_and_every_notebook_installs_it():
    conf = course.settings()
    assert course.release_problem(conf["ref"]) is None
    for path in course.notebook_paths():
        text = path.read_text()
        assert f".git@{conf['ref']}" in text and "@main" not in text, path.name


def test_profiles_full_injects_nothing_and_unknown_profile_fails():
    assert course.parameters_for("01_runtime_check", "full") == {}
    assert course.parameters_for("01_runtime_check", "test")["matmul_size"] > 0
    with pytest.raises(SystemExit, match="PROFILE='fast'"):
        course.parameters_for("01_runtime_check", "fast")


def test_runner_reads_device_and_first_error():
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("x"), nbformat.v4.new_code_cell("y")]
    )
    nb.cells[0].outputs = [
        nbformat.v4.new_output(
            "display_data", data={run_notebooks.DEVICE_MIME: {"description": "GPU Tesla T4"}}
        )
    ]
    nb.cells[1].outputs = [
        nbformat.v4.new_output(
            "error", ename="ParameterError", evalue="Invalid parameter x=-1", traceback=[]
        )
    ]
    assert run_notebooks.device_of(nb) == "GPU Tesla T4"
    assert run_notebooks.first_error(nb) == (
        nb.cells[1].id,
        "ParameterError: Invalid parameter x=-1",
    )


def test_runner_reads_an_error_shown_on_stderr_only():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("install")])
    nb.cells[0].metadata["papermill"] = {"exception": True}
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stderr", text="UsageError: x\n")]
    assert run_notebooks.first_error(nb) == (nb.cells[0].id, "UsageError: x")


def test_readme_links_follow_the_repository():
    text = (
        "[b](https://colab.research.google.com/github/a/b/blob/v0.1.0/notebooks/01_x.ipynb) "
        "`%pip install git+https://github.com/a/b.git@v0.1.0`"
    )
    out = set_repo.rewrite_links(text, "me/course", "v0.2.0")
    badge = "https://colab.research.google.com/github/me/course/blob/v0.2.0/notebooks/01_x.ipynb"
    assert badge in out
    assert "git+https://github.com/me/course.git@v0.2.0" in out


def test_make_run_survives_a_dead_kernel_and_prints_its_summary(tmp_path, monkeypatch, capsys):
    """A kernel the OOM killer ends (here: one that kills itself) is that notebook's failure in
    the summary; the notebooks after it still run."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    cells = {"01_dies": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
             "02_runs": "print('still ran')"}
    for stem, code in cells.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                     "display_name": "Python 3"}
        nbformat.write(nb, folder / f"{stem}.ipynb")
    monkeypatch.setattr(run_notebooks, "notebook_paths",
                        lambda: sorted(folder.glob("*.ipynb")))
    status = run_notebooks.main(["--profile", "test", "--build", str(tmp_path / "build")])
    out = capsys.readouterr().out
    assert status == 1
    assert "notebooks: 1 passed, 1 failed" in out
    assert "01_dies: cell None: DeadKernelError: Kernel died" in out
    assert "still ran" in (tmp_path / "build" / "executed" / "02_runs.ipynb").read_text()


def _two_runs(first: str, second: str, tags=("nbval-check-output",)):
    """The same notebook after two runs whose one cell (tagged ``tags``, as the notebooks tag
    a cell whose output must not change) printed ``first``, then ``second``."""
    runs = []
    for text in (first, second):
        cell = nbformat.v4.new_code_cell("print(x)", id="c1", metadata={"tags": list(tags)})
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        cell.execution_count = 1
        runs.append(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T"), cell]))
    return runs


def test_nbval_comparison_reports_a_marked_cell_whose_runs_disagree():
    assert run_notebooks.outputs_that_differ(*_two_runs("3 devices\n", "3 devices\n")) == []
    differ = run_notebooks.outputs_that_differ(*_two_runs("3 devices\n", "4 devices\n"))
    assert len(differ) == 1 and differ[0].startswith("cell c1: ") and "4 devices" in differ[0]


def test_nbval_comparison_ignores_unmarked_cells():
    assert run_notebooks.outputs_that_differ(*_two_runs("0.31 s\n", "0.29 s\n", tags=())) == []


def test_one_command_moves_the_compat_stack_and_readmes_table(tmp_path, monkeypatch):
    for name in ("COMPAT", "PINNED", "TPU", "KAGGLE_TPU", "README"):
        copy = tmp_path / getattr(compat, name).name
        copy.write_text(getattr(compat, name).read_text())
        monkeypatch.setattr(compat, name, copy)
    assert compat.main(["readme", "--check"]) == 0
    compat.set_image("2027-02", "googlecolab/backend-info", "3.14",
                     ["tensorflow==2.22.0", "keras==3.16.0", "jax==0.8.0", "numpy==2.3.0"])
    text = compat.COMPAT.read_text()
    block = text.split(compat.BEGIN)[1].split(compat.END)[0]
    assert "tensorflow-cpu==2.22.0\n" in block and "jax[cpu]==0.8.0\n" in block
    assert "# python: 3.14\n" in block and "keras==3.13.2" not in text
    assert "pytest==" in text.split(compat.END)[1], "the tools after the block stay"
    table = compat.README.read_text()
    assert "| TensorFlow | 2.22.0 | 2.20.0 | none | 2.20.0 | 2.21.0 |" in table
    assert "| Python | 3.14 | 3.12 | 3.13 | 3.12 | 3.11 |" in table
    assert "(2027-02; googlecolab/backend-info)" in table
    assert compat.main(["readme", "--check"]) == 0
    compat.README.write_text(table.replace("| 2.22.0 |", "| 2.19.0 |"))
    assert compat.main(["readme", "--check"]) == 1
    with pytest.raises(SystemExit, match="--python='3'"):
        compat.set_image("2027-02", "x", "3", ["keras==3.16.0"])


def test_new_cells_get_ids_no_other_cell_has_and_repeats_are_refused():
    nb = make_notebook()
    nb["cells"][3]["id"] = "cell-05"  # an older cell that took the id a new cell would get
    nb["cells"].insert(5, nbformat.v4.new_markdown_cell("a new cell"))
    del nb["cells"][5]["id"]
    cleaned = nbclean.clean(nb, NAME, **CONF)
    ids = [c["id"] for c in cleaned["cells"]]
    assert len(ids) == len(set(ids)) and ids[5].startswith("cell-05-")
    cleaned["cells"][5]["id"] = "cell-05"
    assert any("cell ids must be unique" in p for p in problems(cleaned))


def test_a_reference_in_the_docs_that_names_nothing_fails(tmp_path, monkeypatch, capsys):
    assert check.references() == 0, capsys.readouterr().out  # the docs as they are
    doc = tmp_path / "doc.md"
    doc.write_text("`helpers.dcgan.History`, `tools.course.ROOT`, "
                   "`make test`, a learner's `helpers.py`; `helpers.exercises.verdicts_in`, "
                   "`helpers.scale_out_profile.worker_script`, `make gone`")
    monkeypatch.setattr(check, "DOCS", [str(doc)])
    assert check.references() == 1
    stale = {line.split(": ", 2)[2] for line in capsys.readouterr().out.splitlines()}
    assert stale == {"helpers.exercises.verdicts_in", "helpers.scale_out_profile.worker_script",
                     "make gone"}


def test_readmes_parameter_table_is_generated_from_the_parameters_cells(monkeypatch, capsys,
                                                                        tmp_path):
    """`python -m tools.check parameters` writes it; the check names the first row that differs."""
    assert check.parameter_table(["--check"]) == 0, capsys.readouterr().out
    readme = (course.ROOT / "README.md").read_text()
    row = ("| 05 | `epochs` | `int` | `50` | "
           "epochs in total; a resumed run continues up to this count |")
    assert row in readme, "05's `epochs: int = 50  # epochs in total; ...`"
    last = check.parameter_rows()[-1]
    monkeypatch.setattr(check, "ROOT", tmp_path)
    for changed, have, want in [(readme.replace(row, row.replace("`50`", "`5`")),
                                 row.replace("`50`", "`5`"), row),
                                (readme.replace(last + "\n", ""), "(no row)", last)]:
        (tmp_path / "README.md").write_text(changed)
        assert check.parameter_table(["--check"]) == 1
        assert capsys.readouterr().out == (
            f"README's parameter table has\n  {have}\nwhere the notebooks' parameters cells give"
            f"\n  {want}\nRun `python -m tools.check parameters`.\n")
        assert check.main(["parameters"]) == 0
        assert (tmp_path / "README.md").read_text() == readme


@pytest.mark.parametrize("path", course.notebook_paths(), ids=lambda p: p.stem)
def test_papermill_help_lists_every_parameter_with_its_type_and_comment(path):
    """What `papermill --help-notebook` prints (its own CLI, in this process) holds each
    parameter of the parameters cell: its name, its type and its comment."""
    from papermill.cli import papermill

    shown = CliRunner().invoke(papermill, ["--help-notebook", str(path)]).output
    cells = json.loads(path.read_text())["cells"]
    cell = "".join(next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
                   ["source"])
    assert "Unknown type" not in shown and "Unable to parse" not in shown, shown
    lines = {m[1]: m for m in re.finditer(r"^(\w+): ([^=]+?) = .*?  # (.*)$", cell, re.M)}
    assert set(lines) == set(lessons.defined_names(cell)), cell
    for name, kind, comment in (m.groups() for m in lines.values()):
        assert f"{name}: {kind.strip(chr(34))} (default " in shown, (name, shown)
        assert " ".join(comment.split()[:3]) in " ".join(shown.split()), (comment, shown)
