"""Solutions to notebook 10's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `torch`, `torch_xla`, `xs` and `xm` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 10.1: split a batch between the devices of a mesh
def split_batch(batch, mesh):
    """`batch` on the XLA device, its first axis split over the mesh's "data" axis."""
    on_device = batch.to(torch_xla.device())
    xs.mark_sharding(on_device, mesh, ("data",) + (None,) * (batch.dim() - 1))
    return on_device


# Exercise 10.2: save a checkpoint from the CPU copy
def save_checkpoint(path, model, optimizer, step):
    """Write model, optimizer and step to `path`, loadable without XLA."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    xm.save(state, path)  # every tensor moved to the CPU, then torch.save
