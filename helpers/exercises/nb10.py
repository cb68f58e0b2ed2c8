"""Checks for notebook 10's exercises (PyTorch/XLA), run where the notebook runs (in SPMD mode);
torch and torch_xla are imported in each check, as every notebook loads all the checks."""

from __future__ import annotations

import tempfile
from pathlib import Path

from helpers.exercises import NotDone, exercise, require, untouched


@exercise("10.1", "split a batch between the devices of a mesh",
          hint="Move it with `.to(torch_xla.device())`, then "
               "`xs.mark_sharding(tensor, mesh, ('data', None, ...))`: one name per axis, "
               "'data' for the first, None (whole) for each of the others.",
          right="The tensor is on the XLA device, unchanged, its first axis split over all "
                "the mesh's devices and its other axes whole: what `input_sharding` does.")
def split_batch(fn, mesh=None) -> str | None:
    import torch
    import torch_xla

    count = len(mesh.device_ids)
    for shape in ((8 * count, 1, 4, 4), (4 * count, 3)):
        batch = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float32).reshape(shape)
        result = fn(batch.clone(), mesh)
        require(result)
        result = getattr(result, "global_tensor", result)  # what mark_sharding itself returns
        if not isinstance(result, torch.Tensor) or result.device.type != "xla":
            where = getattr(result, "device", type(result).__name__)
            return f"It returned something on {where}, not a tensor on the XLA device."
        torch_xla.sync()
        if not torch.equal(result.cpu(), batch):
            return "Its values are not the batch's: place it, do not change it."
        spec = torch_xla._XLAC._get_xla_sharding_spec(result)
        want = "[" + ",".join([str(count)] + ["1"] * (len(shape) - 1)) + "]"
        if count > 1 and want not in spec.replace(" ", ""):
            return (f"For a batch of shape {shape} its sharding is {spec or 'none (replicated)'}"
                    f": the first axis must be split {count} ways, the others kept whole.")
    return None


def _leaves(value) -> list:
    """What a state dict holds, its dicts, lists and tuples opened."""
    if isinstance(value, dict):
        return _leaves(list(value.values()))
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


@exercise("10.2", "save a checkpoint from the CPU copy",
          hint="Build a dict {'model': model.state_dict(), 'optimizer': "
               "optimizer.state_dict(), 'step': step} and save it with `xm.save(state, path)`, "
               "which moves every tensor to the CPU first (or move them yourself with .cpu() "
               "before torch.save).",
          right="The file loads without XLA (every tensor on the CPU), and holds the model's "
                "weights, the optimizer's state and the step.")
def save_checkpoint(fn, device=None) -> str | None:
    import torch
    import torch_xla
    from torch import nn

    torch.manual_seed(9)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), 1e-2)
    model(torch.randn(16, 4).to(device)).pow(2).mean().backward()
    optimizer.step()
    torch_xla.sync()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"
        answer = fn(path, model, optimizer, 7)
        if not path.exists():
            if answer is None and untouched(fn):
                raise NotDone
            return "Nothing was written at `path`."
        try:
            state = torch.load(path, map_location=None, weights_only=True)
        except Exception as error:  # XLA tensors, or objects weights_only refuses
            return (f"The file does not load with weights_only=True ({type(error).__name__}): "
                    "save state dicts (tensors, numbers), not the model or optimizer objects.")
    if not isinstance(state, dict) or not {"model", "optimizer", "step"} <= set(state):
        return "The file must hold a dict with the keys 'model', 'optimizer' and 'step'."
    if on_xla := [t for t in _leaves(state)
                  if isinstance(t, torch.Tensor) and t.device.type != "cpu"]:
        return (f"{len(on_xla)} of its tensors are on {on_xla[0].device}, not the CPU: a "
                "machine without XLA cannot load them.")
    if state["step"] != 7:
        return f"Its step is {state['step']!r}, not the step it was given (7)."
    for name, value in model.state_dict().items():
        if name not in state["model"] or not torch.equal(state["model"][name], value.cpu()):
            return f"Its model weights differ from the model's ({name})."
    if not state["optimizer"].get("state"):
        return "Its optimizer state is empty: save optimizer.state_dict() after training."
    return None
