"""Checks for notebook 05's exercises (survive a disconnect)."""

import json
import tempfile
from pathlib import Path

from helpers.exercises import exercise, require


@exercise("05.1", "resume from the newest checkpoint",
          where="`make_checkpoint` and `restore` under \"Checkpoints\"",
          hint="`checkpoint = tf.train.Checkpoint(step=step, weights=weights)`, `manager = "
               "tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)`, then "
               "`checkpoint.restore(manager.latest_checkpoint)` (it is None in an empty folder, "
               "and restoring None does nothing); return `manager, int(step)`.",
          right="It starts at 0 in an empty folder, and new objects resume at the newest "
                "checkpoint, with the values saved there.")
def resume(resume_fn) -> str | None:
    import tensorflow as tf

    def fresh():
        return tf.Variable(0, dtype=tf.int64, trainable=False), tf.Variable(tf.zeros(3))

    with tempfile.TemporaryDirectory(prefix="exercise-05-1-", ignore_cleanup_errors=True) as path:
        step, weights = fresh()
        result = resume_fn(path, step, weights)
        require(result)
        manager, start = result
        require(manager, start)
        if int(start) != 0 or int(step.numpy()) != 0:
            return f"In an empty folder it returned step {int(start)}, not 0 (a new run)."
        for number in (5, 12):  # two checkpoints: resuming must take the newest
            step.assign(number)
            weights.assign([number, number + 1, number + 2])
            manager.save(checkpoint_number=number)
        if not list(Path(path).rglob("*.index")):  # in `directory`, or a sub-folder of it
            return ("Its manager saved nowhere in the folder it was given: make the "
                    "`CheckpointManager` with `directory`.")
        step, weights = fresh()  # new objects, as after a disconnect
        _, start = resume_fn(path, step, weights)
    if int(start) != 12:
        return (f"With checkpoints at steps 5 and 12 in the folder, it resumed at {int(start)}: "
                "restore the newest, `manager.latest_checkpoint`, into the checkpoint.")
    if int(step.numpy()) != 12 or weights.numpy().tolist() != [12, 13, 14]:
        return ("It returned step 12, but the variables it was given still hold their fresh "
                "values: restore them with `checkpoint.restore(...)`, then read the step.")
    return None


@exercise("05.2", "refuse to resume a run whose settings changed",
          where="the `same_run` line under \"The run's settings\", and the prose above it",
          hint="`path = Path(folder) / 'run.json'`; if it does not exist, "
               "`path.write_text(json.dumps(settings))` and return False; otherwise compare "
               "`json.loads(path.read_text())` with `settings`, raise an error naming the keys "
               "that differ, and return True when none does.",
          right="A new folder got its run.json and the answer 'a new run'; the same settings "
                "resume; other ones stop with the change named, and run.json is untouched.")
def same_settings(fn) -> str | None:
    first = {"batch_size": 256, "precision": "mixed_float16", "data": "mnist"}
    with tempfile.TemporaryDirectory(prefix="exercise-05-2-", ignore_cleanup_errors=True) as path:
        result = fn(path, dict(first))
        require(result)
        saved = Path(path) / "run.json"
        if result is not False or _recorded(saved) != first:
            return ("In an empty folder it must write the settings into run.json as JSON (which "
                    "`json.load` reads back as the same dict) and return False, a new run; it "
                    f"returned {result!r}, writing "
                    + (f"{saved.read_bytes()[:60]!r}." if saved.exists() else "nothing."))
        if fn(path, dict(reversed(first.items()))) is not True:
            return ("Called again with the same settings (listed in another order), it must "
                    "return True (resume).")
        changes = {"precision": {**first, "precision": "float32"}, "seed": {**first, "seed": 1},
                   "data": {k: v for k, v in first.items() if k != "data"}}
        for key, settings in changes.items():  # a value changed, a setting added, one dropped
            try:
                fn(path, settings)
            except Exception as error:  # any error: the task does not name its type
                if key not in str(error):
                    return (f"It stopped for a changed {key!r}, but its message does not name it: "
                            f"{error!s:.80}")
            else:
                return (f"With {key!r} changed (it was {first.get(key)!r}, now "
                        f"{settings.get(key)!r}) it went on: a checkpoint would be restored "
                        "under other settings. Raise an error naming what changed.")
            if (now := _recorded(saved)) != first:  # rewritten alike (same settings): as it was
                did = "wrote the new settings in it" if now == settings else "changed or removed it"
                return f"With {key!r} changed, it {did}: leave run.json as it was."
    return None


def _recorded(path: Path):  # what `json.load` reads from `path`; None if missing or not JSON
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
