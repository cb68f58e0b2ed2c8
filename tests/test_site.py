"""The course site's pieces that need no Sphinx and no browser: the home page generated
from README.md, link rewriting, and staging.
(The built site itself is checked in Chromium by tests/test_site_browser.py.)"""

import json
import re
from pathlib import Path

import nbformat
import pytest

from tools import course, site
from tools.site import SITE_MARKER, SiteError, replace

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools

REPO = {"repository": "me/course", "ref": "v1.0"}


NOTEBOOKS = [Path("02_second.ipynb"), Path("01_first.ipynb")]


def test_the_home_page_is_the_readme_with_navigation_in_course_order():
    readme = ("# Course\n\n| 01 | [First](notebooks/01_first.ipynb) |\n\n"
              "See [the notes](docs/instructor_notes.md), [pins](requirements.txt), "
              "[Colab](https://colab.research.google.com) and [below](#two-commands).\n")
    ordered = sorted(NOTEBOOKS)
    page = site.home_page(readme, ordered, [Path("docs/instructor_notes.md")], **REPO)
    assert page.startswith("# Course\n\n| 01 | [First](notebooks/01_first.ipynb) |")
    assert "[the notes](docs/instructor_notes.md)" in page
    assert "[pins](https://github.com/me/course/blob/v1.0/requirements.txt)" in page
    assert "[Colab](https://colab.research.google.com)" in page
    assert "[below](#two-commands)" in page
    nav = page[page.index(":caption: Notebooks"):]
    assert nav.index("notebooks/01_first") < nav.index("notebooks/02_second")
    assert "docs/instructor_notes" in page[page.index(":caption: For instructors"):]


def test_notebook_links_resolve_from_the_notebooks_folder():
    text = ("[04](04_dcgan.ipynb), [helper](../helpers/dcgan.py#L3), "
            "[fits](#Find-what-fits,-auto), ![grid](grid.png)")
    pages = {Path("notebooks/04_dcgan.ipynb")}
    anchors = site.jupyter_anchors("## Find what fits, auto\n")
    out = site.rewrite_links(text, Path("notebooks/06.ipynb"), pages, **REPO, anchors=anchors)
    assert "[04](04_dcgan.ipynb)" in out
    assert "[helper](https://github.com/me/course/blob/v1.0/helpers/dcgan.py#L3)" in out
    assert "[fits](#find-what-fits-auto)" in out
    assert "![grid](https://github.com/me/course/blob/v1.0/notebooks/grid.png)" in out


@pytest.mark.parametrize(
    "heading, anchor",
    [("Find what fits, automatically", "find-what-fits-automatically"),
     ("The Keras path: `fit` under the strategy", "the-keras-path-fit-under-the-strategy"),
     ("Measure, per batch size, beside an estimate", "measure-per-batch-size-beside-an-estimate")],
)
def test_slugs_are_the_sites_heading_anchors(heading, anchor):
    assert site.slug(heading) == anchor


def test_a_missing_executed_notebook_is_one_line_with_the_fix(tmp_path):
    first, second = course.notebook_paths()[:2]
    (tmp_path / "executed").mkdir()
    (tmp_path / "executed" / first.name).write_text(first.read_text())
    with pytest.raises(site.SiteError) as error:
        site.stage(tmp_path / "executed", tmp_path / "src", [first, second])
    message = str(error.value)
    assert "\n" not in message and "`make run`" in message
    assert second.name in message and first.name not in message
    with pytest.raises(site.SiteError, match="has no executed notebooks: run `make run`"):
        site.stage(tmp_path / "nothing", tmp_path / "src", [first, second])


def test_staging_keeps_the_repository_layout_and_reports_failed_runs(tmp_path):
    source_dir, executed = tmp_path / "notebooks", tmp_path / "executed"
    source_dir.mkdir()
    executed.mkdir()
    paths = []
    for name, failed in (("01_first.ipynb", False), ("02_second.ipynb", True)):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}")])
        nbformat.write(nb, source_dir / name)
        if failed:
            cell = nbformat.v4.new_code_cell("1 / 0", id="boom")
            cell.outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError",
                                                   evalue="division by zero", traceback=[])]
            nb.cells.append(cell)
        nbformat.write(nb, executed / name)
        paths.append(source_dir / name)
    notices = site.stage(executed, tmp_path / "src", paths)
    assert (tmp_path / "src" / "notebooks" / "01_first.ipynb").is_file()
    index = (tmp_path / "src" / "index.md").read_text()
    assert index.startswith((course.ROOT / "README.md").read_text().splitlines()[0])
    assert index.index("notebooks/01_first") < index.index("notebooks/02_second")
    pictures = re.findall(r"!\[[^\]]*\]\((?![a-z]+:)([^)]+)\)",
                          (course.ROOT / "README.md").read_text())  # the repository's own
    assert pictures, "README's first screen shows a picture"
    for picture in pictures:  # staged beside the home page, and linked there as they are
        assert (tmp_path / "src" / picture).read_bytes() == (course.ROOT / picture).read_bytes()
        assert f"]({picture})" in index
    assert notices == ["02_second.ipynb stopped with an error in cell boom: "
                       "ZeroDivisionError: division by zero"]
    staged = json.loads((tmp_path / "src" / "notebooks" / "02_second.ipynb").read_text())
    assert staged["cells"][1]["outputs"][0]["ename"] == "ZeroDivisionError"


def test_the_instructor_notes_point_at_sections_that_exist():
    notes = (course.ROOT / "docs" / "instructor_notes.md").read_text()
    links = re.findall(r"\]\(\.\./notebooks/(\d\d_\w+\.ipynb)#([\w-]+)\)", notes)
    assert links
    missing = []
    for name, anchor in links:
        nb = nbformat.read(course.NOTEBOOKS / name, as_version=4)
        markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        if anchor not in site.jupyter_anchors(markdown).values():
            missing.append(f"{name}#{anchor}")
    assert not missing, f"no such section heading: {missing}"


def test_out_may_be_neither_the_working_folder_nor_a_link(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thesis.tex").write_text("months of work")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    for out, why in ((".", "it is the working folder itself"), ("link", "is a link")):
        assert site.main(["--out", out]) == 2
        assert why in capsys.readouterr().err
    assert (tmp_path / "thesis.tex").exists() and (tmp_path / "elsewhere").is_dir()


def test_the_site_deletes_only_folders_it_made(tmp_path):
    """`tools.site --out DIR` replaces DIR and DIR-src only where it made them."""
    made = tmp_path / "site"
    made.mkdir()
    (made / SITE_MARKER).write_text("made")
    (made / "index.html").write_text("old page")
    replace(made)
    assert not made.exists()
    replace(tmp_path / "never-made")  # missing: nothing to do
    empty = tmp_path / "empty"
    empty.mkdir()
    replace(empty)
    assert not empty.exists()
    theirs = tmp_path / "thesis"
    theirs.mkdir()
    (theirs / "chapter1.tex").write_text("months of work")
    with pytest.raises(SiteError, match="was not made by tools.site: nothing was deleted"):
        replace(theirs)
    assert (theirs / "chapter1.tex").read_text() == "months of work"
