"""Solutions to notebook 05's exercises.

Each block replaces the exercise cell that starts with the same line (`make solutions` writes
the solved notebooks into build/solutions; `make test` checks every one).
"""
# Names such as `tf` come from the notebook's earlier cells:
# ruff: noqa: F821

# Exercise 05.1: resume from the newest checkpoint
def resume(directory, step, weights):
    """A manager of `step` and `weights` in `directory`, restored from its newest checkpoint
    if there is one; returns the manager and the step to continue from (0 for a new run)."""
    checkpoint = tf.train.Checkpoint(step=step, weights=weights)
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
    checkpoint.restore(manager.latest_checkpoint)  # None in an empty folder: nothing to do
    return manager, int(step.numpy())


# Exercise 05.2: refuse to resume a run whose settings changed
def same_settings(folder, settings):
    """True to resume the run in `folder`, False for a new one (then `folder/run.json` records
    `settings`); an error naming what changed if `settings` differ from the recorded ones."""
    path = Path(folder) / "run.json"
    if not path.exists():
        path.write_text(json.dumps(settings))
        return False
    saved = json.loads(path.read_text())
    changed = sorted(k for k in {*saved, *settings} if saved.get(k) != settings.get(k))
    if changed:
        raise RuntimeError(f"the run's settings changed: {', '.join(changed)}; nothing deleted")
    return True
