"""Tables that read well in Colab (HTML) and in plain text, and a grid of images."""

import html
import math
from collections.abc import Sequence

import numpy as np


class Table:  # shown as HTML in a notebook and as aligned text everywhere else
    def __init__(self, rows: Sequence[Sequence[object]], headers: Sequence[str]):
        self.headers = [str(h) for h in headers]
        self.rows = [[f"{v:.3g}" if isinstance(v, float) else str(v) for v in row] for row in rows]
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(f"row {row} has {len(row)} cells, expected {len(self.headers)}")

    def __repr__(self) -> str:
        widths = [max(map(len, column)) for column in zip(self.headers, *self.rows, strict=True)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                         for row in [self.headers, ["-" * w for w in widths], *self.rows])

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in self.headers)
        rows = ("".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row)
                for row in self.rows)
        body = "".join(f"<tr>{cells}</tr>" for cells in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def subplots(*args, **kwargs):
    """``matplotlib.pyplot.subplots``, imported on first use: importing a module stays light."""
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def image_grid(images, labels=None, class_names=None, count: int = 16, title: str = ""):
    """The first ``count`` images (uint8 or float, NHWC) in a square grid, as a figure."""
    count = min(count, len(images))
    side = math.ceil(math.sqrt(count))
    fig, axes = subplots(side, side, figsize=(1.6 * side, 1.6 * side + 0.3), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= count:
            continue
        image = np.asarray(images[i])
        ax.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray")  # RGB ignores it
        if labels is not None:
            label = int(labels[i])
            ax.set_title(class_names[label] if class_names else str(label), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
