import numpy as np
import pytest

from helpers.display import Table, image_grid


def test_table_text_and_html():
    table = Table([["a<b", 1.23456], ["c", 2]], ["name", "value"])
    assert repr(table).splitlines() == ["name  value", "----  -----", "a<b   1.23", "c     2"]
    html = table._repr_html_()
    assert "a&lt;b" in html and "<th style='text-align:left'>name</th>" in html


def test_table_rejects_ragged_rows():
    with pytest.raises(ValueError):
        Table([[1, 2, 3]], ["a", "b"])


def test_image_grid_draws_the_requested_count():
    images = np.zeros((10, 8, 8, 1), dtype="uint8")
    fig = image_grid(images, np.arange(10), [str(i) for i in range(10)], count=5, title="t")
    shown = [ax for ax in fig.axes if ax.images]
    assert len(shown) == 5 and shown[4].get_title() == "4"
