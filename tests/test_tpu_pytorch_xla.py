"""Notebook 10's plumbing (helpers.tpu_pytorch_xla) and its exercise checks, with right and
wrong answers, on PyTorch/XLA's CPU backend split into 8 devices, in SPMD mode.

`make tpu-unit` runs this file alone on the TPU stack with PJRT_DEVICE=CPU and
CPU_NUM_DEVICES=8, as notebook 10's first cell sets them; elsewhere it is skipped.
"""

import os

import pytest

pytestmark = pytest.mark.tpu
if os.environ.get("PJRT_DEVICE") != "CPU":
    pytest.skip("needs PJRT_DEVICE=CPU from the start (make tpu-unit)", allow_module_level=True)

torch = pytest.importorskip("torch")
torch_xla = pytest.importorskip("torch_xla")
import numpy as np  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from solved import solution_functions  # noqa: E402

from helpers import exercises, tpu_pytorch_xla  # noqa: E402
from helpers.errors import RunSettingsChanged, RunUnreadable  # noqa: E402
from helpers.lessons import nb10 as lesson  # noqa: E402

xr.use_spmd()
DEVICE = torch_xla.device()
MESH = xs.Mesh(np.arange(xr.global_runtime_device_count()), (8,), ("data",))
SOLUTIONS = solution_functions("10_tpu_pytorch_xla", torch=torch, torch_xla=torch_xla, xs=xs,
                               xm=xm)


def test_eight_cpu_devices():
    assert xr.global_runtime_device_count() == 8
    described = tpu_pytorch_xla.describe(xr.device_type(), 8)
    assert described == "8 simulated CPU device(s) (no TPU here)"
    assert tpu_pytorch_xla.describe("TPU", 8) == "8 TPU chip(s)"


def test_other_settings_stop_the_resume_and_delete_nothing(tmp_path):
    path = tmp_path / "step-0000010.pt"
    path.write_bytes(b"kept")
    same = {"global_batch_size": 256, "use_bfloat16": True}
    tpu_pytorch_xla.same_settings(same, dict(same), path)
    with pytest.raises(RunSettingsChanged, match="use_bfloat16 was True, now False.*nothing was "
                                                 "deleted"):
        tpu_pytorch_xla.same_settings(same, {**same, "use_bfloat16": False}, path)
    assert path.read_bytes() == b"kept"


def test_only_the_runs_own_checkpoints_are_pruned_oldest_first(tmp_path):
    for step in (10, 20, 30, 40):
        (tmp_path / f"step-{step:07d}.pt").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "step-0000050.pt.partial").write_bytes(b"half")
    deleted = tpu_pytorch_xla.keep_newest(tmp_path, 3)
    assert [p.name for p in deleted] == ["step-0000010.pt"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["notes.txt", "step-0000020.pt", "step-0000030.pt", "step-0000040.pt",
                    "step-0000050.pt.partial"]


def test_a_later_runs_checkpoints_are_never_pruned(tmp_path):
    """An older step saved now (a run resumed from before a corrupt newest file) never prunes
    what lies beyond it."""
    for step in (100, 200, 300, 400):
        (tmp_path / f"step-{step:07d}.pt").write_bytes(b"x")
    (tmp_path / "step-0000050.pt").write_bytes(b"just saved")
    deleted = tpu_pytorch_xla.keep_newest(tmp_path, 3, upto=50)
    assert deleted == [] and len(tpu_pytorch_xla.checkpoints(tmp_path)) == 5


def test_a_run_folder_of_unreadable_checkpoints_stops_the_new_run(tmp_path):
    tpu_pytorch_xla.none_unreadable(tmp_path)  # nothing there: a new run may start
    (tmp_path / "step-0000900.pt").write_bytes(b"truncated")
    with pytest.raises(RunUnreadable, match="none could be read .*nothing was deleted"):
        tpu_pytorch_xla.none_unreadable(tmp_path)
    assert (tmp_path / "step-0000900.pt").read_bytes() == b"truncated"


def test_the_old_calls_are_probed_in_this_runtime():
    rows = {row[0]: row[2] for row in tpu_pytorch_xla.old_and_new()}
    assert rows["xm.xrt_world_size(), xm.get_ordinal()"] == "xm.xrt_world_size: gone"
    assert "torch_xla.device" in rows["xm.xla_device()"]
    assert rows["a GradScaler with bfloat16"] == "torch_xla.amp.GradScaler: ImportError"


def test_the_lesson_networks_make_and_score_28x28_images():
    generator, discriminator = lesson.make_generator(), lesson.make_discriminator()
    images = generator(torch.zeros(2, 100))
    assert images.shape == (2, 1, 28, 28) and discriminator(images).shape == (2, 1)


# Exercise 10.1: a batch split over the mesh
def _to_device(batch, mesh):
    return batch.to(torch_xla.device())


def _wrong_axis(batch, mesh):
    on = batch.to(torch_xla.device())
    xs.mark_sharding(on, mesh, (None, "data") + (None,) * (batch.dim() - 2))
    return on


def _with_partition_spec(batch, mesh):  # right: the same split, written another way
    on = batch.to(torch_xla.device())
    xs.mark_sharding(on, mesh, tuple(["data"] + [None] * (batch.dim() - 1)))
    return on


def _returns_mark_sharding(batch, mesh):  # right: mark_sharding's own return value
    return xs.mark_sharding(batch.to(torch_xla.device()), mesh,
                            ("data",) + (None,) * (batch.dim() - 1))


@pytest.mark.parametrize("answer", [SOLUTIONS["split_batch"], _with_partition_spec,
                                    _returns_mark_sharding],
                         ids=["the solution", "a list-built spec", "mark_sharding's result"])
def test_09_1_accepts_right_answers(answer):
    assert exercises.check("10.1", answer, mesh=MESH).passed


@pytest.mark.parametrize("answer, said", [
    (_to_device, "none (replicated)"),
    (_wrong_axis, "first axis must be split 8 ways"),
    (lambda batch, mesh: batch, "not a tensor on the XLA device"),
    (lambda batch, mesh: None, "placeholder"),
], ids=["only moved", "the wrong axis", "left on the CPU", "untouched"])
def test_09_1_names_the_mistake(answer, said):
    result = exercises.check("10.1", answer, mesh=MESH)
    assert not result.passed and said in result.message, result.message


# Exercise 10.2: a checkpoint from the CPU copy
def _cpu_by_hand(path, model, optimizer, step):  # right: .cpu() by hand, then torch.save
    def cpu(value):
        if isinstance(value, torch.Tensor):
            return value.cpu()
        if isinstance(value, dict):
            return {k: cpu(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(cpu(v) for v in value)
        return value
    torch.save(cpu({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}), path)


def _tree_map(path, model, optimizer, step):  # right: every tensor moved, with torch's pytree
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(torch.utils._pytree.tree_map(
        lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, state), path)


def _xla_tensors(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, path)


def _no_optimizer(path, model, optimizer, step):
    xm.save({"model": model.state_dict(), "step": step}, path)


def _pickled_model(path, model, optimizer, step):
    torch.save({"model": model.cpu(), "optimizer": optimizer, "step": step}, path)


def test_09_2_untouched_placeholder():
    def save_checkpoint(path, model, optimizer, step):
        """Write model, optimizer and step to `path`, loadable without XLA."""
        ...
    result = exercises.check("10.2", save_checkpoint, device=DEVICE)
    assert not result.passed and "placeholder" in result.message


@pytest.mark.parametrize("answer", [SOLUTIONS["save_checkpoint"], _cpu_by_hand, _tree_map],
                         ids=["the solution", "cpu() by hand", "pytree map"])
def test_09_2_accepts_right_answers(answer):
    result = exercises.check("10.2", answer, device=DEVICE)
    assert result.passed, result.message


@pytest.mark.parametrize("answer, said", [
    (_xla_tensors, "not the CPU"),
    (_no_optimizer, "keys 'model', 'optimizer' and 'step'"),
    (_pickled_model, "weights_only=True"),
    (lambda path, model, optimizer, step: 0, "Nothing was written"),
], ids=["XLA tensors saved", "no optimizer", "objects pickled", "writes nothing"])
def test_09_2_names_the_mistake(answer, said):
    result = exercises.check("10.2", answer, device=DEVICE)
    assert not result.passed and said in result.message, result.message
