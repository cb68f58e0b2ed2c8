"""An ipywidgets panel to run the matmul benchmark interactively in Colab.

The panel only collects choices and calls the same functions the notebook
runs headlessly; without a widget frontend (papermill, nbval) it is built and
shown as text, and never waits for input.
"""

from __future__ import annotations

from collections.abc import Callable

SIZES = (256, 512, 1024, 2048, 4096, 8192)


def matmul_panel(kinds: dict[str, str], run: Callable, show: Callable):
    """Build the panel: sizes, dtypes and devices to pick, a Run button, an output area.

    ``kinds`` maps a device kind ("cpu", "gpu", "tpu") to its name; ``run(sizes,
    dtypes, kind, device)`` returns records; ``show(records)`` displays them.
    The returned box has ``.button`` (``.button.click()`` runs it) and ``.records``.
    """
    import ipywidgets as widgets

    sizes = widgets.SelectMultiple(options=SIZES, value=(512, 1024, 2048), description="sizes")
    dtypes = widgets.SelectMultiple(
        options=("float32", "float16", "bfloat16"), value=("float32",), description="dtypes"
    )
    devices = widgets.SelectMultiple(
        options=list(kinds), value=(list(kinds)[-1],), description="devices"
    )
    button = widgets.Button(description="Run", button_style="primary")
    output = widgets.Output()
    box = widgets.VBox([widgets.HBox([sizes, dtypes, devices]), button, output])
    box.records = []

    def on_click(_):
        output.clear_output()
        records = []
        for kind in devices.value:
            records += run(sorted(sizes.value), list(dtypes.value), kind, kinds[kind])
        box.records = records
        with output:
            show(records)

    button.on_click(on_click)
    box.button, box.sizes, box.dtypes, box.devices = button, sizes, dtypes, devices
    return box
