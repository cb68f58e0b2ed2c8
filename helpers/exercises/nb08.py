"""Checks for notebook 08's exercises (scale out and profile)."""

import copy
import os
import re
import tempfile
from pathlib import Path
from unittest import mock

from helpers.exercises import exercise, require

CLUSTERS = {"three workers": {"worker": ["a:1", "b:1", "c:1"]},
            'a "chief" and two workers': {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
            "no TF_CONFIG at all": {}}


def _tasks(cluster: dict):  # (TF_CONFIG, name, is the chief) per task ({}: one program, its own)
    if not cluster:
        yield {}, "the single program", True
    for kind, hosts in cluster.items():
        for i in range(len(hosts)):
            yield ({"cluster": cluster, "task": {"type": kind, "index": i}}, f"{kind} {i}",
                   kind == "chief" or (kind == "worker" and i == 0 and "chief" not in cluster))


@exercise("08.1", "the chief's shared folder and each worker's scratch folder",
          where="the cell of `worker.py` that picks `own_dir`, and the TF_CONFIG cells before it",
          hint="The chief is the task of type \"chief\" where the cluster has one, else worker 0, "
               "and a program with no TF_CONFIG is its own chief (read with `.get`, as the dict "
               "may be empty). Every other task gets a folder of its own under `scratch`, named "
               "by its type and index.",
          right="Only the chief's checkpoints land in the shared folder, whichever way the "
                "cluster names its chief, and no two workers write over each other's scratch.")
def checkpoint_dir(fn) -> str | None:
    before = dict(os.environ)  # put back on leaving, whatever the answer did or raised
    with mock.patch.dict(os.environ), tempfile.TemporaryDirectory() as folder:
        shared, scratch = Path(folder, "shared"), Path(folder, "scratch")
        for name, cluster in CLUSTERS.items():
            owners = {}
            for config, task, chief in _tasks(cluster):
                require(got := fn(copy.deepcopy(config), str(shared), str(scratch)))
                if changed := sorted({key for key, _ in before.items() ^ os.environ.items()}):
                    return (f"It left {', '.join(changed)} changed in `os.environ` (the check "
                            "put it back): the programs this kernel starts inherit it.")
                if not isinstance(got, str | os.PathLike):
                    return f"For {task} it returned a {type(got).__name__}, not a folder's path."
                got = Path(got).resolve()
                if chief and got != shared.resolve():
                    return (f"With {name}, {task} is the chief, yet it saves into {got.name!r}, "
                            "not the shared folder: the run would have no checkpoint to resume.")
                if not chief and got == shared.resolve():
                    why = (': a cluster that names a "chief" has no other chief, worker 0 '
                           "included" if "chief" in cluster else "")
                    return (f"With {name}, {task} also saves into the shared folder, which is "
                            f"the chief's alone{why}.")
                if not chief and scratch.resolve() not in (got, *got.parents):
                    return (f"With {name}, {task} saves into {str(got)!r}, not a folder under "
                            "`scratch`: the workers' copies go to their own disk.")
                if not chief and got in owners:
                    return (f"With {name}, {owners[got]} and {task} save into the same folder: "
                            "each needs its own, or they write over each other's files.")
                owners[got] = task
    return None


@exercise("08.2", "profile notebook 04's step and name its first fix",
          where="the profiler section: `capture`, the cell that reads both traces, and `advice`",
          hint="Three calls of this notebook do the work, as in the classifier's profile: "
               "`capture` (given a function that runs 04's step on the batch and returns one "
               "loss), `read_trace` on the file it returns, and `advice`.",
          right="You traced a real training step on this device, after its warm-up, with each "
                "step marked, and read from the trace what to fix first: the loop to use on "
                "your own model.")
def profile_gan(fn, advice) -> str | None:
    """``advice``: notebook 08's own reading of a trace, which the check cell passes."""
    for steps, batch in ((3, 16), (2, 24)):  # the sizes the task names, then others
        _stop_profiler()  # one that an earlier, failed try left running would fail this one
        with tempfile.TemporaryDirectory() as folder:
            try:
                got = fn(folder, steps, batch)
            finally:
                left_running = _stop_profiler()
            if left_running:
                return ("The profiler was still running after your function returned: stop it in a "
                        "`finally` (`tf.profiler.experimental.stop()`), or the next capture fails.")
            require(got)
            if not isinstance(got, tuple) or len(got) != 2:
                return (f"It returned a {type(got).__name__}: return a pair, the trace's summary "
                        "and the first fix.")
            if not hasattr(summary := got[0], "step_ms") or not hasattr(summary, "by_type"):
                return (f"The first value is a {type(summary).__name__}, not the summary that "
                        "`read_trace` returns.")
            if len(summary.step_ms) != steps:
                return (f"The trace has {len(summary.step_ms)} marked steps, not the {steps} "
                        "asked for (`steps`).")
            if Path(folder).resolve() not in Path(summary.path).resolve().parents:
                return f"The trace {summary.path} was not written under `logdir`."
            names = " ".join(op.name for op in summary.ops).lower()
            if "generator" not in names or "discriminator" not in names:
                return ("The trace holds no op of a generator and a discriminator: it is not "
                        "notebook 04's DCGAN step (build it with `build_gan`, `make_train_step`).")
            shapes = re.findall(rb"\[(\d+),(7|14|28),\2,\d+\]", Path(summary.path).read_bytes())
            if (seen := {int(n) for n, _ in shapes}) and batch not in seen:  # images' buffers
                return f"The steps traced ran on batches of {min(seen)}, not `batch_size`, {batch}."
            if got[1] != (want := advice(summary)[0]):
                return (f"For this trace the first fix is {want[:70]!r}..., not "
                        f"{str(got[1])[:70]!r}: return `advice(summary)[0]`.")
    return None


def _stop_profiler() -> bool:
    import tensorflow as tf

    try:
        tf.profiler.experimental.stop()
    except tf.errors.OpError:  # "No profiler is running"
        return False
    return True
