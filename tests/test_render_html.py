"""The HTML that `make run` writes (tools/run_notebooks.render_html): GIF outputs such as
notebook 04's progress animation are shown as images, not as their text repr."""

import base64
import io
import re

import nbformat
import pytest
from PIL import Image

from tools import run_notebooks

# the maintainers' tools (or the package's structure): the same on every stack (see pyproject.toml)
pytestmark = pytest.mark.tools


def gif_bytes() -> bytes:
    frames = [Image.new("L", (8, 8), shade) for shade in (0, 255)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return buffer.getvalue()


def notebook_with_gif(gif: bytes):
    cell = nbformat.v4.new_code_cell("Image(filename='progress.gif')")
    cell.outputs = [nbformat.v4.new_output(
        "execute_result", execution_count=1,
        data={"image/gif": base64.b64encode(gif).decode(),
              "text/plain": "<IPython.core.display.Image object>"},
    )]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# GIF"), cell])


def test_a_gif_output_is_an_image_in_the_html(tmp_path):
    gif = gif_bytes()
    executed = tmp_path / "10_gif.ipynb"
    nbformat.write(notebook_with_gif(gif), executed)
    html = run_notebooks.render_html(executed, tmp_path / "html").read_text()
    assert "<IPython.core.display.Image object>" not in html.replace("&lt;", "<").replace(
        "&gt;", ">"), "the GIF fell back to its text/plain repr"
    shown = re.findall(r'<img[^>]*src="data:image/gif;base64,([^"]+)"', html)
    assert [base64.b64decode(data) for data in shown] == [gif]


def test_an_output_with_its_own_html_is_left_alone():
    nb = notebook_with_gif(gif_bytes())
    nb.cells[1].outputs[0].data["text/html"] = "<p>mine</p>"
    assert run_notebooks.gif_outputs_as_html(nb).cells[1].outputs[0].data["text/html"] == (
        "<p>mine</p>")


def test_figures_are_outputs_even_under_the_agg_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")  # as `make test` sets it
    source = tmp_path / "10_plot.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nfigure, ax = plt.subplots()\nax.plot([0, 1])")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, source)
    result = run_notebooks.execute(source, tmp_path / "build", {})
    assert result.status == "passed", result.error
    outputs = nbformat.read(result.executed, as_version=4).cells[0].outputs
    assert any("image/png" in o.get("data", {}) for o in outputs), outputs
