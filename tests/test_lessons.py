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


def write(folder, name, nb):
    path = folder / name
    path.write_text(json.dumps(nb))
    return path


def test_module_name_drops_the_number():
    assert lessons.module_name("04_dcgan.ipynb") == "dcgan"
    assert lessons.module_name("03_tfdata_pipelines.ipynb") == "tfdata_pipelines"


def test_only_marked_cells_are_saved_in_order_without_the_marker():
    nb = notebook(
        "x = 1", "#@save\ndef a():\n    return 1\n", "# @save not a marker", "#@save\nB = 2"
    )
    assert lessons.saved_cells(nb) == ["def a():\n    return 1", "B = 2"]


def test_magics_cannot_be_saved():
    with pytest.raises(lessons.LessonError, match="magics"):
        lessons.saved_cells(notebook("#@save\n%timeit f()"))


def test_cells_saved_apart_get_their_module_and_an_import_where_they_stood():
    nb = notebook("#@save\nA = 1", "#@save shapes\ndef square(x):\n    return x * x",
                  "#@save shapes\ndef cube(x):\n    return x ** 3\n_HIDDEN = 0",
                  "#@save\nB = square(2)")
    modules = lessons.modules_of("09_demo.ipynb", nb)
    assert modules["shapes"] == ["def square(x):\n    return x * x",
                                 "def cube(x):\n    return x ** 3\n_HIDDEN = 0"]
    own = modules["demo"]
    assert own[0] == "A = 1" and own[2] == "B = square(2)"
    assert own[1].endswith("from helpers.lessons.shapes import cube, square")  # one import
    assert lessons.modules_of("09_demo.ipynb", notebook("#@save shapes\nC = 1")) == {
        "shapes": ["C = 1"]}  # nothing of its own: no module of its own


@pytest.mark.parametrize("marker", ["#@save two words", "#@save 9lives"])
def test_a_malformed_marker_is_refused(marker):
    with pytest.raises(lessons.LessonError, match="#@save NAME"):
        lessons.saved_cells(notebook(f"{marker}\nA = 1"))


def test_generated_module_runs_and_names_its_notebook(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    path = write(nbs, "09_demo.ipynb", notebook("#@save\nimport math\n\n\ndef area(r):\n"
                                                "    return math.pi * r * r\n"))
    assert lessons.sync([path], out) == (0, ["wrote demo.py"])
    text = (out / "demo.py").read_text()
    assert "notebooks/09_demo.ipynb" in text
    namespace = {}
    exec(compile(text, "demo.py", "exec"), namespace)
    assert namespace["area"](1.0) == pytest.approx(3.14159, rel=1e-5)
    assert lessons.sync([path], out, check=True)[0] == 0


def test_check_fails_on_drift_and_on_orphans(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    path = write(nbs, "09_demo.ipynb", notebook("#@save\nA = 1"))
    lessons.sync([path], out)
    write(nbs, "09_demo.ipynb", notebook("#@save\nA = 2"))  # the notebook changed
    status, lines = lessons.sync([path], out, check=True)
    assert status == 1 and "demo.py: differs" in lines[0]
    write(nbs, "09_demo.ipynb", notebook("A = 2"))  # no saved cells left
    status, lines = lessons.sync([path], out, check=True)
    assert status == 1 and "no notebook has #@save cells" in lines[0]
    assert lessons.sync([path], out) == (0, ["removed demo.py (no #@save cells left)"])


def test_a_file_it_did_not_write_is_never_replaced_or_removed(tmp_path):
    nbs, out = tmp_path / "nbs", tmp_path / "lessons"
    nbs.mkdir()
    out.mkdir()
    (out / "demo.py").write_text("# mine\n")
    path = write(nbs, "09_demo.ipynb", notebook("#@save\nA = 1"))
    status, lines = lessons.sync([path], out)
    assert status == 1 and "not generated" in lines[0]
    assert (out / "demo.py").read_text() == "# mine\n"


def test_the_course_lessons_match_their_notebooks():
    status, lines = lessons.sync(lessons.notebook_paths(lessons.NOTEBOOKS), check=True)
    assert status == 0, lines
