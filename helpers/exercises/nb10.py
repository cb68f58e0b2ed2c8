"""Checks for notebook 10's exercises (PyTorch/XLA), run where the notebook runs (in SPMD mode)."""

import copy
import itertools

from helpers.exercises import exercise, require

_CHECKS = itertools.count(1)  # each check builds new programs: an earlier try's never hide one


@exercise("10.1", "score every image with one compiled shape",
          where="the cell that feeds a short last batch to the discriminator",
          hint="Cut `images` into batches on the CPU, pad the last one with zeros to "
               "`batch_size` images (torch.cat), move each batch to the device, run the model, "
               "move its logits to the CPU (.cpu()), then concatenate them and cut off the "
               "padding's logits on the CPU.",
          right="Every image scored, in order, and other numbers of images compiled nothing "
                "new: each batch had the one shape, and only the CPU saw the ragged end.")
def score_all(fn, device=None) -> str | None:
    import torch
    import torch_xla.debug.metrics as met
    from torch import nn

    def xla_counts():  # programs compiled, then programs run (in SPMD mode), so far
        return [(met.metric_data(k) or [0])[0] for k in ("CompileTime", "ExecuteReplicatedTime")]

    width = 8 + next(_CHECKS)  # a new hidden width: new programs for every check
    torch.manual_seed(width)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, width), nn.Tanh(), nn.Linear(width, 1))
    on_cpu, seen, grad = copy.deepcopy(model), [], torch.is_grad_enabled()
    model[0].register_forward_pre_hook(lambda _, x: seen.append((len(x[0]), x[0].device.type)))
    for count, size in ((53, 16), (41, 16), (32, 16), (29, 12), (36, 12)):
        images, before, seen[:] = torch.randn(count, 1, 4, 4), xla_counts(), []  # short: 5, 9, 0
        with torch.set_grad_enabled(grad):  # on leaving: grad mode as found, whatever it did
            logits = fn(model.to(device), images.clone(), size)
            left = torch.is_grad_enabled(), next(model.parameters()).device.type
        require(logits)
        if not isinstance(logits, torch.Tensor):
            return f"It returned a {type(logits).__name__}, not a tensor of logits."
        logits = logits.detach().cpu().reshape(-1)  # counted: a concatenation on the device
        new, ran = (now - then for now, then in zip(xla_counts(), before, strict=True))
        if len(logits) != count:
            return f"For {count} images it returned {len(logits)} logits: one per image, in order."
        if not torch.allclose(logits, on_cpu(images).detach().reshape(-1), atol=1e-2):  # TPU: bf16
            return "Its logits are not the model's for those images, in their order."
        if left != (grad, "xla"):
            return (f"It left the model on {left[1]} and gradients {'on' if left[0] else 'off'}: "
                    "leave both as they were (`with torch.no_grad():` ends with its block).")
        if set(seen) != {(size, "xla")} or not ran:
            return (f"With batch_size={size}, the model got (images, device) {sorted(set(seen))} "
                    f"and XLA ran {ran} program(s): give it batch_size images, on the device.")
        if new and count not in (53, 29):  # the first call with each batch size may compile
            return (f"{count} images in batches of {size} compiled {new} new program(s): after the "
                    "first call of a batch size, nothing may: pad, then slice and join on the CPU.")
    return None


@exercise("10.2", "split a two-input batch between the devices",
          where="the section on keeping the data on the device (its input_sharding note)",
          hint="For each tensor, `.to(torch_xla.device())`, then `xs.mark_sharding(t, mesh, "
               "('data',) + (None,) * (t.dim() - 1))`: one name per axis, so the labels' spec "
               "is shorter than the images'.",
          right="Both tensors are on the XLA device, unchanged, each split on its first axis "
                "over all the mesh's devices, the other axes whole.")
def split_pair(fn, mesh=None) -> str | None:
    import torch
    import torch_xla

    count = len(mesh.device_ids)
    for shape, label_shape in (((8 * count, 1, 4, 4), (8 * count,)),
                               ((4 * count, 3), (4 * count, 2))):
        images, labels = torch.randn(shape), torch.randint(0, 10, label_shape)
        result = fn(images.clone(), labels.clone(), mesh)
        require(result)
        if not isinstance(result, tuple | list) or len(result) != 2:
            return "It must return the pair (images, labels), both placed."
        for name, want, got in (("images", images, result[0]), ("labels", labels, result[1])):
            got = getattr(got, "global_tensor", got)  # what mark_sharding itself returns
            if not isinstance(got, torch.Tensor) or got.device.type != "xla":
                where = getattr(got, "device", type(got).__name__)
                return f"Its {name} are on {where}, not on the XLA device."
            torch_xla.sync()
            if got.dtype != want.dtype or not torch.equal(got.cpu(), want):
                return f"Its {name} are not the ones given (values or dtype): place, do not change."
            spec = torch_xla._XLAC._get_xla_sharding_spec(got).replace(" ", "")
            split = "[" + ",".join([str(count)] + ["1"] * (want.dim() - 1)) + "]"
            if count > 1 and split not in spec:
                return (f"Its {name} of shape {tuple(want.shape)} carry the sharding "
                        f"{spec or 'none (whole on every device)'}: split the first axis "
                        f"{count} ways, keep the others whole (one name per axis).")
    return None
