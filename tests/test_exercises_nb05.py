"""Notebook 05's exercise checks: each says "right" to its solution (the block in
solutions/05_survive_a_disconnect.py, run as the notebook would) and "not yet", with the
expected reason, to the untouched exercise and to the usual mistakes."""

import ast
import json
import os
import pickle
import tempfile
import time
from pathlib import Path

import pytest
from solved import solution_functions

from helpers.exercises import check

UNTOUCHED = "still holds its placeholder"


@pytest.fixture(scope="module")
def solved(tf):
    """The names the solutions define, with the notebook's `tf` and `keras`."""
    import keras

    return solution_functions("05_survive_a_disconnect", tf=tf, keras=keras, json=json, Path=Path)


def untouched(*args, **kwargs):
    """An exercise function whose body is still `...`."""


# 05.1: resume


def test_resume_solution_is_right(solved):
    verdict = check("05.1", solved["resume"])
    assert verdict.passed, verdict.message


def test_resume_untouched_is_not_done():
    assert UNTOUCHED in check("05.1", untouched).message


def _resume(tf, which=None, restore=True):
    def resume(directory, step, weights):
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
        if restore and manager.checkpoints:
            checkpoint.restore(manager.checkpoints[which])
        return manager, int(step.numpy())

    return resume


def test_resume_right_with_latest_checkpoint_and_read(tf):
    def resume(directory, step, weights):
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        if newest := tf.train.latest_checkpoint(directory):
            checkpoint.read(newest).assert_existing_objects_matched()
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=5), int(step)

    verdict = check("05.1", resume)
    assert verdict.passed, verdict.message


def test_resume_catches_no_restore(tf):
    verdict = check("05.1", _resume(tf, restore=False))
    assert not verdict.passed and "resumed at 0" in verdict.message


def test_resume_catches_the_oldest_checkpoint(tf):
    verdict = check("05.1", _resume(tf, which=0))
    assert not verdict.passed and "resumed at 5" in verdict.message


def test_resume_catches_a_step_read_from_the_file_name(tf):
    def from_name(directory, step, weights):  # the number, but not the values
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(step=step, weights=weights), directory, max_to_keep=3)
        latest = manager.latest_checkpoint
        return manager, int(latest.rsplit("-", 1)[1]) if latest else 0

    verdict = check("05.1", from_name)
    assert not verdict.passed and "fresh values" in verdict.message


def test_resume_right_with_restore_or_initialize(tf):
    def resume(directory, step, weights):
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(step=step, weights=weights), directory, max_to_keep=2)
        manager.restore_or_initialize()  # the newest checkpoint, if any
        return manager, step.numpy().item()

    verdict = check("05.1", resume)
    assert verdict.passed, verdict.message


def test_resume_right_with_the_largest_number(tf):
    def resume(directory, step, weights):
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
        numbers = [int(p.stem.rsplit("-", 1)[1]) for p in Path(directory).glob("ckpt-*.index")]
        if numbers:
            checkpoint.restore(f"{directory}/ckpt-{max(numbers)}").expect_partial()
        return manager, int(step)

    verdict = check("05.1", resume)
    assert verdict.passed, verdict.message


def test_resume_catches_names_sorted_as_text(tf):
    """ckpt-12 sorts before ckpt-5 as text: the checkpoints are numbered past 9."""
    def resume(directory, step, weights):
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
        if found := sorted(Path(directory).glob("*.index")):
            checkpoint.restore(str(found[-1].with_suffix("")))
        return manager, int(step)

    verdict = check("05.1", resume)
    assert not verdict.passed and "resumed at 5" in verdict.message


def test_resume_catches_variables_of_its_own(tf):
    def resume(directory, step, weights):  # restores into new variables, not the given ones
        mine = tf.Variable(0, dtype=tf.int64), tf.Variable(tf.zeros(3))
        checkpoint = tf.train.Checkpoint(step=mine[0], weights=mine[1])
        manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)
        checkpoint.restore(manager.latest_checkpoint)
        return manager, int(mine[0])

    verdict = check("05.1", resume)
    assert not verdict.passed and "resumed at 0" in verdict.message


def test_resume_leaves_no_folder_behind(tf, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    check("05.1", _resume(tf, which=-1))
    assert list(tmp_path.iterdir()) == []


# 05.2: run settings


def test_settings_solution_is_right(solved):
    verdict = check("05.2", solved["same_settings"])
    assert verdict.passed, verdict.message


def test_settings_untouched_is_not_done():
    assert UNTOUCHED in check("05.2", untouched).message


def _settings(overwrite=False, write=True, raises=False):
    def same_settings(folder, settings):
        path = Path(folder) / "run.json"
        if raises and path.exists():
            raise ValueError("run.json exists")  # names nothing that changed
        existed = path.exists()
        if write and (overwrite or not existed):
            path.write_text(json.dumps(settings))
        return existed

    return same_settings


def test_settings_catches_a_run_that_goes_on_with_other_settings():
    verdict = check("05.2", _settings(overwrite=True))
    assert not verdict.passed and "went on" in verdict.message


def test_settings_catches_nothing_written():
    verdict = check("05.2", _settings(write=False))
    assert not verdict.passed and "writing nothing" in verdict.message


def test_settings_catches_an_error_for_the_same_settings():
    verdict = check("05.2", _settings(raises=True))  # even with the same settings
    assert not verdict.passed and "raised ValueError: run.json exists" in verdict.message


def test_settings_catches_a_dropped_setting(tmp_path):
    """Previously accepted: it compares only the keys of the new settings (the task says a
    setting added or dropped is a change too)."""
    def same_settings(folder, settings):  # a KeyError-free compare, and its own error type
        run = tmp_path / "unused"
        path = f"{folder}/run.json"
        try:
            with open(path) as f:
                saved = json.load(f)
        except FileNotFoundError:
            with open(path, "w") as f:
                json.dump(settings, f)
            return False
        for key in settings:
            if saved.get(key) != settings[key]:
                raise ValueError(f"{key} was {saved.get(key)!r}, now {settings[key]!r}")
        return not run.exists()

    verdict = check("05.2", same_settings)
    assert not verdict.passed
    assert "With 'data' changed (it was 'mnist', now None)" in verdict.message


def test_settings_right_with_an_assert():
    def same_settings(folder, settings):
        path = Path(folder, "run.json")
        if not path.is_file():
            path.write_text(json.dumps(settings, sort_keys=True))
            return False
        saved = json.loads(path.read_text())
        keys = sorted(saved.keys() | settings.keys())
        changed = [k for k in keys if saved.get(k) != settings.get(k)]
        assert not changed, f"cannot resume: {changed} changed"
        return True

    verdict = check("05.2", same_settings)
    assert verdict.passed, verdict.message

def _compared(keys="both", message="names", error=RuntimeError, as_text=False):
    def same_settings(folder, settings):
        path = Path(folder) / "run.json"
        if not path.exists():
            path.write_text(json.dumps(settings))
            return False
        if as_text:  # the same settings in another order differ as text
            if path.read_text() != json.dumps(settings):
                raise error("settings changed")
            return True
        saved = json.loads(path.read_text())
        names = {"both": {*saved, *settings}, "new": set(settings), "saved": set(saved)}[keys]
        changed = sorted(k for k in names if saved.get(k) != settings.get(k))
        if changed:
            raise error(", ".join(changed) if message == "names" else "settings changed")
        return True

    return same_settings


def test_settings_right_with_a_bare_exception():  # the task names no error type
    verdict = check("05.2", _compared(error=Exception))
    assert verdict.passed, verdict.message


def test_settings_right_with_a_dict_difference():
    def same_settings(folder, settings):
        path = os.path.join(folder, "run.json")
        if not os.path.isfile(path):
            with open(path, "w") as f:
                json.dump(settings, f, indent=2)
            return False
        with open(path) as f:
            saved = json.load(f)
        if saved != settings:
            diff = set(saved.items()) ^ set(settings.items())
            raise ValueError(f"refusing to resume, changed: {sorted({k for k, _ in diff})}")
        return True

    verdict = check("05.2", same_settings)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("answer", "says"), [
    (_compared(keys="new"), "With 'data' changed"),  # a dropped setting goes unseen
    (_compared(keys="saved"), "With 'seed' changed"),  # an added one goes unseen
    (_compared(message="vague"), "does not name it"),
    (_compared(as_text=True), "settings changed"),  # raised for the same settings reordered
])
def test_settings_catches_partial_compares(answer, says):
    verdict = check("05.2", answer)
    assert not verdict.passed and says in verdict.message, verdict.message


# issue 50, class 5: the checkpoint manager in a sub-folder of `directory` is in it (05.1)


def _in_sub_folder(tf, where):
    def resume(directory, step, weights):
        checkpoint = tf.train.Checkpoint(step=step, weights=weights)
        manager = tf.train.CheckpointManager(checkpoint, where(directory), max_to_keep=3,
                                             checkpoint_name="model")
        checkpoint.restore(manager.latest_checkpoint)
        return manager, int(step)

    return resume


@pytest.mark.parametrize("where", [
    lambda directory: os.path.join(directory, "ckpt"),
    lambda directory: Path(directory) / "run" / "checkpoints",
    lambda directory: f"{directory}/tf_ckpts/",
])
def test_resume_right_with_a_sub_folder(tf, where):
    """Previously rejected: "saved nowhere in the folder it was given"."""
    verdict = check("05.1", _in_sub_folder(tf, where))
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("where", "says"), [
    (lambda directory: "checkpoints", "saved nowhere in the folder it was given"),  # the cwd
    (lambda directory: tempfile.mkdtemp(), "saved nowhere in the folder it was given"),
    (lambda directory: os.path.join(directory, str(time.perf_counter_ns())), "resumed at 0"),
])
def test_resume_catches_a_folder_outside_or_new_each_time(tf, where, says, tmp_path,
                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    verdict = check("05.1", _in_sub_folder(tf, where))
    assert not verdict.passed and says in verdict.message, verdict.message


# issue 50, class 4: run.json is JSON that `json.load` reads back as the settings (05.2)


def _recorded_as(write, read):
    def same_settings(folder, settings):
        path = Path(folder) / "run.json"
        if not path.exists():
            path.write_bytes(write(settings))
            return False
        saved = read(path.read_bytes())
        changed = sorted(k for k in {*saved, *settings} if saved.get(k) != settings.get(k))
        if changed:
            raise ValueError(f"changed: {changed}")
        return True

    return same_settings


def _as_lines(settings):  # key=value lines, compared as text
    return "\n".join(f"{k}={v}" for k, v in settings.items()).encode()


@pytest.mark.parametrize(("write", "read"), [
    (lambda s: str(s).encode(), lambda b: ast.literal_eval(b.decode())),  # a repr, not JSON
    (pickle.dumps, pickle.loads),
    (_as_lines, lambda b: dict(line.split("=", 1) for line in b.decode().splitlines())),
    (lambda s: json.dumps(sorted(s.items())).encode(), lambda b: dict(json.loads(b))),
])
def test_settings_catches_a_run_json_that_is_not_the_settings_as_json(write, read):
    """Previously accepted (each reads back what it wrote)."""
    answer = _recorded_as(write, read)
    if write is _as_lines:  # its values come back as text: compare them as text
        def answer(folder, settings, inner=answer):
            return inner(folder, {k: str(v) for k, v in settings.items()})
    verdict = check("05.2", answer)
    assert not verdict.passed and "as JSON (which `json.load` reads back" in verdict.message
    assert "it returned False, writing b" in verdict.message, verdict.message


# issue 50, class 5: writing the same settings again leaves run.json as it was (05.2)


def _rewrites(on_resume=None, on_change=None):
    def same_settings(folder, settings):
        path = Path(folder) / "run.json"
        if not path.exists():
            path.write_text(json.dumps(settings))
            return False
        saved = json.loads(path.read_text())
        if changed := sorted(k for k in {*saved, *settings} if saved.get(k) != settings.get(k)):
            if on_change:
                on_change(path, saved, settings)
            raise ValueError(f"settings changed: {changed}")
        if on_resume:
            path.write_text(json.dumps(settings, indent=2, sort_keys=True))  # the same settings
        return True

    return same_settings


@pytest.mark.parametrize("answer", [
    _rewrites(on_resume=True),
    _rewrites(on_change=lambda path, saved, new: path.write_text(json.dumps(saved, indent=1))),
    _rewrites(on_resume=True, on_change=lambda path, saved, new: path.write_bytes(
        json.dumps(dict(sorted(saved.items()))).encode())),
])
def test_settings_right_when_it_writes_the_same_settings_again(answer):
    """Previously "It rewrote run.json with the new settings", which was false."""
    verdict = check("05.2", answer)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("on_change", "says"), [
    (lambda path, saved, new: path.write_text(json.dumps(new)), "wrote the new settings in it"),
    (lambda path, saved, new: path.unlink(), "changed or removed it"),
    (lambda path, saved, new: path.write_text(json.dumps({**saved, "refused": True})),
     "changed or removed it"),
])
def test_settings_catches_run_json_changed_on_a_change(on_change, says):
    verdict = check("05.2", _rewrites(on_change=on_change))
    assert not verdict.passed and says in verdict.message, verdict.message
    assert verdict.message.startswith("With 'precision' changed, it "), verdict.message
