"""Solutions to notebook 10's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `torch`, `torch_xla` and `xs` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 10.1: score every image with one compiled shape
def score_all(model, images, batch_size):
    """The logit of every image of `images`, each batch of one shape on the XLA device."""
    logits = []
    for start in range(0, len(images), batch_size):
        part = images[start:start + batch_size]  # cut on the CPU: no new program
        padding = part.new_zeros(batch_size - len(part), *part.shape[1:])
        out = model(torch.cat([part, padding]).to(torch_xla.device()))  # always batch_size
        logits.append(out.cpu()[:len(part)])  # the padding's logits cut off on the CPU
    return torch.cat(logits)


# Exercise 10.2: split a two-input batch between the devices
def split_pair(images, labels, mesh):
    """Images and labels on the XLA device, each split on its first axis over "data"."""
    placed = []
    for tensor in (images, labels):
        on_device = tensor.to(torch_xla.device())
        xs.mark_sharding(on_device, mesh, ("data",) + (None,) * (tensor.dim() - 1))
        placed.append(on_device)
    return tuple(placed)
