"""Checks for notebook 11's exercises (Keras 3 on JAX), run where the notebook runs."""

import random
import re

import numpy as np

from helpers.exercises import exercise, keras_as_found, require


@exercise("11.1", "find the largest batch that fits a budget",
          where="the cells under \"The largest batch that fits\" (`largest_batch`)",
          hint="If memory_of(8) > budget, return 0. Else double a batch until it no longer "
               "fits, then bisect between the last that fit and the first that did not, in "
               "steps of 8: each call is a compile, so never walk up 8 at a time.",
          right="On memory curves and budgets it had not seen, it returned the largest "
                "multiple of 8 within the budget, in few calls.")
def fit_batch(fn) -> str | None:
    curves = {"linear": lambda b: 5e6 + 3e4 * b, "steep": lambda b: 1e5 + 2.5e5 * b,
              "stepped": lambda b: 2e6 + 4e4 * (-(-b // 128) * 128)}
    for name, curve in curves.items():
        for budget in (2e6, 9.3e6, 3.1e7, 4.7e8):
            calls = []

            def memory_of(batch, curve=curve, calls=calls):
                calls.append(batch)
                if not isinstance(batch, int | np.integer) or batch < 1:
                    raise ValueError(f"memory_of was given batch={batch!r}: a whole batch size")
                return curve(int(batch))

            want = max((b for b in range(8, 20000, 8) if curve(b) <= budget), default=0)
            got = fn(memory_of, budget)
            require(got)
            if len(calls) > 40:
                return (f"It called memory_of {len(calls)} times for a budget of {budget:.3g} "
                        "bytes: each is a compile; double, then bisect.")
            if got != want:
                return (f"For a budget of {budget:.3g} bytes on a {name} curve it returned "
                        f"{got!r}; the largest multiple of 8 that fits is {want}.")


@exercise("11.2", "write a LayoutMap that splits the model's kernels",
          where="the cell under \"Split the model\" (`layout_map`)",
          hint="`layout = keras.distribution.LayoutMap(mesh)`, then "
               "`layout[\".*block.*kernel\"] = (None, \"model\")`: a key that matches the whole "
               "variable path (Keras 3.14+ uses re.fullmatch), and None for the kernel's rows.",
          right="Every `block` kernel was split by columns along `model`, the others kept "
                "whole, on Keras's matching before and after 3.14.")
def split_kernels(fn, mesh) -> str | None:  # mesh: the notebook's (data, model) DeviceMesh
    import keras

    with keras_as_found(keras):
        layout = fn(mesh)
        require(layout)
        if not isinstance(layout, keras.distribution.LayoutMap):
            return f"It returned a {type(layout).__name__}, not a keras.distribution.LayoutMap."
        splits = mesh.shape[list(mesh.axis_names).index("model")]
        for names in (("block_a", "block_b", "head"), ("blockx", "other", "block2")):
            model_parallel = keras.distribution.ModelParallel(layout_map=layout,
                                                              batch_dim_name="data")
            with model_parallel.scope():
                random.seed(0)
                widths = (8 * splits, 4 * splits, 2 * splits)
                model = keras.Sequential([keras.Input((12,)), *[
                    keras.layers.Dense(w, name=n) for n, w in zip(names, widths, strict=True)]])
            for name in names:
                variable = model.get_layer(name).kernel
                if name.startswith("block") and not any(re.fullmatch(k, variable.path)
                                                        for k in layout.keys()):
                    return (f"No key matches the whole path {variable.path!r}: Keras 3.14+ "
                            "matches keys with re.fullmatch (write `.*` around the name).")
                spec = tuple(variable.value.sharding.spec)
                spec += (None,) * (2 - len(spec))
                want = (None, "model") if name.startswith("block") else (None, None)
                if splits > 1 and spec != want:
                    return (f"{name}'s kernel is laid out {spec}, not {want}: split the block "
                            "kernels' columns along 'model', keep the others whole.")
        return None
