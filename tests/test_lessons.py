"""tools.lessons: ``#@save`` cells become helpers/lessons modules, and drift is caught."""

import json

import pytest

from tools import lessons

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def notebook(*sources: str) -> dict:
    return {"cells": [
        {"cell_type": "code", "id": f"c{i}", "source": s.splitlines(keepends=True)}
        for i, s in enumerate(sources)
    ]}


def saved_cells(nb: dict) -> list[str]:
    """The sources of the notebook's ``#@save`` cells, marker line removed."""
    return [source for _, source, _ in lessons.marked_cells(nb)]


def write(folder, name, nb):
    path = folder / name
    path.write_text(json.dumps(nb))
    return path


def test_module_name_is_the_notebooks_number():  # never the name of a plumbing module
    assert list(lessons.modules_of("04_dcgan.ipynb", notebook("#@save\nA = 1"))) == ["nb04"]
    assert list(lessons.modules_of("03_tfdata_pipelines.ipynb", notebook("#@save\nA = 1"))) == [
        "nb03"]


def test_each_cell_names_its_notebook_and_section():
    nb = notebook("#@save\nA = 1")
    nb["cells"].insert(0, {"cell_type": "markdown", "source": ["# Title\n", "\n", "## Setup"]})
    nb["cells"].append({"cell_type": "markdown", "source": ["## The step\n", "text"]})
    nb["cells"].append({"cell_type": "code", "source": ["#@save\n", "B = 2"]})
    assert lessons.modules_of("10_demo.ipynb", nb)["nb10"] == [
        "# 10_demo.ipynb, section 'Setup'\nA = 1", "# 10_demo.ipynb, section 'The step'\nB = 2"]


def test_only_marked_cells_are_saved_in_order_without_the_marker():
    nb = notebook(
        "x = 1", "#@save\ndef a():\n    return 1\n", "# @save not a marker", "#@save\nB = 2"
    )
    assert saved_cells(nb) == ["def a():\n    return 1", "B = 2"]


def test_magics_cannot_be_saved():
    with pytest.raises(lessons.LessonError, match="magics"):
        saved_cells(notebook("#@save\n%timeit f()"))


def test_cells_saved_apart_get_their_module_and_an_import_where_they_stood():
    nb = notebook("#@save\nA = 1", "#@save shapes\ndef square(x):\n    return x * x",
                  "#@save shapes\ndef cube(x):\n    return x ** 3\n_HIDDEN = 0",
                  "#@save\nB = square(2)")
    modules = lessons.modules_of("10_demo.ipynb", nb)
    assert modules["shapes"] == ["def square(x):\n    return x * x",
                                 "def cube(x):\n    return x ** 3\n_HIDDEN = 0"]
    own = modules["nb10"]
    assert own[0] == "A = 1" and own[2] == "B = square(2)"
    assert own[1].endswith("from helpers.lessons.shapes import cube, square")  # one import
    assert lessons.modules_of("10_demo.ipynb", notebook("#@save shapes\nC = 1")) == {
        "shapes": ["C = 1"]}  # nothing of its own: no module of its own


@pytest.mark.parametrize("marker", ["#@save two words", "#@save 9lives"])
def test_a_malformed_marker_is_refused(marker):
    with pytest.raises(lessons.LessonError, match="#@save NAME"):
        saved_cells(notebook(f"{marker}\nA = 1"))


def test_generated_module_runs_and_names_its_notebook(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    path = write(nbs, "10_demo.ipynb", notebook("#@save\nimport math\n\n\ndef area(r):\n"
                                                "    return math.pi * r * r\n"))
    assert lessons.sync([path], out) == (0, ["wrote nb10.py"])
    text = (out / "nb10.py").read_text()
    assert "notebooks/10_demo.ipynb" in text
    namespace = {}
    exec(compile(text, "nb10.py", "exec"), namespace)
    assert namespace["area"](1.0) == pytest.approx(3.14159, rel=1e-5)
    assert lessons.sync([path], out, check=True)[0] == 0


def test_check_fails_on_drift_and_on_orphans(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    path = write(nbs, "10_demo.ipynb", notebook("#@save\nA = 1"))
    lessons.sync([path], out)
    write(nbs, "10_demo.ipynb", notebook("#@save\nA = 2"))  # the notebook changed
    status, lines = lessons.sync([path], out, check=True)
    assert status == 1 and "nb10.py: differs" in lines[0]
    write(nbs, "10_demo.ipynb", notebook("A = 2"))  # no saved cells left
    status, lines = lessons.sync([path], out, check=True)
    assert status == 1 and "no notebook has #@save cells" in lines[0]
    assert lessons.sync([path], out) == (0, ["removed nb10.py (no #@save cells left)"])


def test_a_file_it_did_not_write_is_never_replaced_or_removed(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    out.mkdir()
    (out / "nb10.py").write_text("# mine\n")
    path = write(nbs, "10_demo.ipynb", notebook("#@save\nA = 1"))
    status, lines = lessons.sync([path], out)
    assert status == 1 and "not generated" in lines[0]
    assert (out / "nb10.py").read_text() == "# mine\n"
