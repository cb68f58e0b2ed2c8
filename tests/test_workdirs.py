"""Work folders: a notebook empties only a folder it made, and its defaults are git-ignored."""

import ast
import errno
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import folder_parameters

from helpers import workdirs
from helpers.errors import RunSettingsChanged, WorkFolderBusy
from helpers.params import ParameterError, folder
from tools import course


@pytest.fixture
def users(tmp_path):
    """A learner's own folder, with their work in it."""
    path = tmp_path / "my_project"
    path.mkdir()
    (path / "thesis.tex").write_text("months of work")
    return path


def test_a_new_folder_is_made_marked_and_emptied_on_the_next_run(tmp_path):
    work = workdirs.prepare(tmp_path / "runs" / "a")
    kept = sorted([workdirs.MARKER, workdirs.LOCK])  # the marker, and the lock this run holds
    assert workdirs.is_marked(work) and sorted(p.name for p in work.iterdir()) == kept
    (work / "records").mkdir()
    (work / "records" / "part-0").write_text("data")
    (work / "log.txt").write_text("old")
    again = workdirs.prepare(work)  # the notebook runs again: its own folder is emptied
    assert again == work and sorted(p.name for p in work.iterdir()) == kept


def test_without_fresh_a_marked_folder_is_kept_for_resuming(tmp_path):
    run = workdirs.prepare(tmp_path / "run", "run_dir", fresh=False)
    (run / "ckpt-1.index").write_text("checkpoint")
    assert workdirs.prepare(run, "run_dir", fresh=False) == run
    assert (run / "ckpt-1.index").read_text() == "checkpoint"
    workdirs.prepare(run, "run_dir", fresh=True)  # fresh_start: only now it is emptied
    assert not (run / "ckpt-1.index").exists()


def test_an_empty_folder_is_taken_and_marked(tmp_path):
    (tmp_path / "empty").mkdir()
    assert workdirs.is_marked(workdirs.prepare(tmp_path / "empty"))


@pytest.mark.parametrize("fresh", [True, False])
def test_a_users_folder_is_refused_and_survives(users, fresh):
    with pytest.raises(ParameterError) as error:
        workdirs.prepare(users, "run_dir", fresh=fresh)
    message = str(error.value)
    assert message.startswith(f"Invalid parameter run_dir={str(users)!r}: it holds files and no ")
    assert "allowed: a new or empty folder" in message and "\n" not in message
    assert [p.name for p in users.iterdir()] == ["thesis.tex"]


@pytest.mark.parametrize("value", [".", "..", "~", "/"])
def test_the_working_folder_those_above_it_home_and_root_are_never_used(
    value, tmp_path, monkeypatch
):
    inner = tmp_path / "course" / "notebooks"
    inner.mkdir(parents=True)
    monkeypatch.chdir(inner)
    monkeypatch.setenv("HOME", str(tmp_path / "course"))
    path = workdirs.Path(value).expanduser()
    assert workdirs.problem(path) is not None
    marker = path / workdirs.MARKER
    if value in (".", "..", "~"):
        marker.write_text("a marker does not make the working folder safe to empty")
    with pytest.raises(ParameterError, match="working folder|home|root"):
        workdirs.prepare(path)
    assert inner.exists()


def test_a_marked_folder_is_emptied_without_following_links(tmp_path, users):
    work = workdirs.prepare(tmp_path / "work")
    (work / "link").symlink_to(users, target_is_directory=True)
    workdirs.prepare(work)
    assert (users / "thesis.tex").exists() and not (work / "link").exists()


def test_the_folder_rule_refuses_in_the_validation_cell(users, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rule = folder()
    assert rule("work_dir", "course_runs/x") == "course_runs/x"  # new: fine
    for value in ("", "  ", 3, None, ".", "..", str(users)):
        with pytest.raises(ParameterError, match=r"^Invalid parameter work_dir=") as error:
            rule("work_dir", value)
        assert "\n" not in str(error.value)
    shutil.rmtree(users)
    assert rule("work_dir", str(users)) == str(users)  # gone: it may be made afresh


def test_inside_drive_the_folder_must_be_below_mydrive(tmp_path):
    drive = tmp_path / "MyDrive"
    (drive / "papers").mkdir(parents=True)
    (drive / "papers" / "draft.doc").write_text("mine")
    rule = folder(inside=str(drive))
    assert rule("run_dir", "course_runs/dcgan_run") == "course_runs/dcgan_run"
    for value in (".", "..", "papers", "a/../.."):
        with pytest.raises(ParameterError, match=r"^Invalid parameter run_dir="):
            rule("run_dir", value)
    assert (drive / "papers" / "draft.doc").exists()


def defaults(path) -> dict:
    """The default values of a notebook's parameters cell; one that depends on the runtime
    (06, 09, 10: ``256 if cpu_replicas else 1024``) as its source text."""
    cells = json.loads(path.read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c["metadata"].get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    values = {}
    for node in tree.body:  # `name: type = value  # comment`
        try:
            values[node.target.id] = ast.literal_eval(node.value)
        except ValueError:
            values[node.target.id] = ast.unparse(node.value)
    return values


FOLDER_DEFAULTS = {"03": "work_dir", "04": "work_dir", "05": "run_dir", "06": "work_dir",
                   "08": "work_dir"}


def test_every_default_work_folder_lives_under_the_one_ignored_root():
    """So a notebook run in place (cwd = notebooks/) leaves `git status` clean."""
    seen = {}
    for path in course.notebook_paths():
        name = FOLDER_DEFAULTS.get(path.stem[:2])
        if name:
            seen[path.stem] = value = defaults(path)[name]
            assert value.startswith(workdirs.ROOT + "/"), (path.stem, value)
            assert name in folder_parameters(path), "validated with params.folder"
    assert len(seen) == 5
    if shutil.which("git") is None or not (course.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for value in seen.values():
        probe = f"notebooks/{value}/{workdirs.MARKER}"
        done = subprocess.run(["git", "check-ignore", "-q", probe], cwd=course.ROOT)
        assert done.returncode == 0, f"{probe} is not ignored by git"


HOLD = """
import sys, time
from helpers import workdirs
workdirs.prepare(sys.argv[1], "work_dir", fresh=False)
print("held", flush=True)
time.sleep(60)
"""


def test_a_folder_in_use_by_another_process_is_refused_and_kept(tmp_path):
    """Two kernels (or papermill runs) on one work folder: the second stops in one line naming
    the first, before it empties anything; once the first ends, the folder is free again."""
    work = workdirs.prepare(tmp_path / "work")
    (work / "ckpt-1000.index").write_text("the other run's checkpoint")
    workdirs._HELD.pop(work.resolve()).close()  # this process lets go: now it is the other one
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(work)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(WorkFolderBusy, match=rf"in use by process {other.pid} on "):
            workdirs.prepare(work, "work_dir", fresh=True)
        assert (work / "ckpt-1000.index").read_text() == "the other run's checkpoint"
    finally:
        other.kill()
        other.wait()
    workdirs.prepare(work, "work_dir", fresh=True)  # its lock died with it
    assert not (work / "ckpt-1000.index").exists() and (work / workdirs.LOCK).exists()


def files(folder) -> dict:
    """Every file in ``folder`` and its content, but the locks (whose holder they name)."""
    return {p: p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink() and p.name != workdirs.LOCK}


def test_emptying_a_folder_takes_the_locks_of_the_work_folders_inside_it(tmp_path):
    """04's run folder, in use by another kernel, inside a folder pasted as a work_dir: nothing
    of it is deleted; once that kernel is gone, the outer folder is emptied."""
    outer = workdirs.prepare(tmp_path / "outer")
    inner = workdirs.prepare(outer / "dcgan_run", "run_dir", fresh=False)
    (inner / "checkpoints").mkdir()
    (inner / "checkpoints" / "ckpt-3.index").write_text("three hours")
    workdirs._HELD.pop(inner.resolve()).close()  # another kernel holds it, not this one
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(inner)], stdout=subprocess.PIPE,
                             text=True)
    before = files(outer)
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(WorkFolderBusy, match=rf"dcgan_run is in use by process {other.pid}"):
            workdirs.prepare(outer, "work_dir")
        assert files(outer) == before
    finally:
        other.kill()
        other.wait()
    workdirs.prepare(inner, "run_dir", fresh=False)  # this kernel's own: still in use
    with pytest.raises(WorkFolderBusy, match="dcgan_run is in use by this kernel"):
        workdirs.prepare(outer, "work_dir")
    assert files(outer) == before
    workdirs._HELD.pop(inner.resolve()).close()
    workdirs.prepare(outer, "work_dir")
    assert sorted(p.name for p in outer.iterdir()) == sorted([workdirs.MARKER, workdirs.LOCK])


@pytest.mark.parametrize("run_file", ["run.json", "step-120.pt"])
def test_a_folder_holding_another_notebooks_run_is_never_emptied_as_a_work_dir(tmp_path, run_file):
    work = workdirs.prepare(tmp_path / "work")
    (work / "pasted").mkdir()
    (work / "pasted" / run_file).write_text("a run")
    before = files(work)
    with pytest.raises(ParameterError, match=rf"it holds a run \(.*{run_file}\)"):
        workdirs.prepare(work, "work_dir")
    assert files(work) == before
    workdirs.prepare(work, "run_dir", fresh=True)  # its own run, fresh_start=True: replaced
    assert not (work / "pasted").exists()


def test_a_lock_or_marker_that_is_not_a_plain_file_is_never_written_through(tmp_path):
    """A folder from elsewhere (a zip, a Kaggle data set) may carry links with these names."""
    target = tmp_path / "bashrc"
    target.write_text("the user's file")
    work = tmp_path / "work"
    work.mkdir()
    (work / workdirs.LOCK).symlink_to(target)
    (work / workdirs.MARKER).write_text(workdirs.MARKER_TEXT.format(made_by=""))
    with pytest.raises(WorkFolderBusy, match="cannot be opened as a lock .*nothing was deleted"):
        workdirs.prepare(work, "work_dir")
    assert target.read_text() == "the user's file" and (work / workdirs.LOCK).is_symlink()
    (work / workdirs.LOCK).unlink()
    os.mkfifo(work / workdirs.LOCK)  # opening a FIFO would block: refused at once
    with pytest.raises(WorkFolderBusy, match="is not a regular file"):
        workdirs.prepare(work, "work_dir")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "data.txt").write_text("theirs")
    (linked / workdirs.MARKER).symlink_to(target)  # a linked marker marks nothing
    with pytest.raises(ParameterError, match="no .course_work_folder marker"):
        workdirs.prepare(linked, "work_dir")
    assert (linked / "data.txt").read_text() == "theirs" and target.read_text() == "the user's file"


KERNEL = """
import os, subprocess, sys, time
from helpers import processes, workdirs
run = workdirs.prepare(sys.argv[1], "run_dir", fresh=False)
child = subprocess.Popen(  # as notebook 04's launch cell starts its training process
    [sys.executable, "-c", "from helpers.processes import follow_launcher; "
     "follow_launcher(0.5); import time; time.sleep(600)"],
    env={**os.environ, processes.LAUNCHER_ENV: str(os.getpid())},
    pass_fds=workdirs.lock_fds(run))
workdirs._HELD.pop(run.resolve()).close()  # the kernel lets go: the child still holds it
print(child.pid, flush=True)
time.sleep(600)
"""


def test_the_kernel_hands_its_lock_to_its_training_child_which_ends_with_it(tmp_path):
    """One lock, inherited: while 04's training child lives, no other kernel takes run_dir,
    even after the kernel dies; the child ends within 5 s of the kernel, and frees it."""
    run = tmp_path / "dcgan_run"
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(run)], stdout=subprocess.PIPE,
                              text=True)
    child = int(kernel.stdout.readline())
    with pytest.raises(WorkFolderBusy, match=f"in use by process {kernel.pid}"):
        workdirs.prepare(run, "run_dir", fresh=True)
    kernel.kill()
    kernel.wait()
    died = time.monotonic()
    while time.monotonic() - died < 5 and Path(f"/proc/{child}").exists() and not zombie(child):
        time.sleep(0.05)
    assert time.monotonic() - died < 5, "the child outlived its kernel by 5 s"
    while True:  # free again, within the same 5 s (a loaded machine tears a process down slowly)
        try:
            workdirs.prepare(run, "run_dir", fresh=True)
            break
        except WorkFolderBusy:
            assert time.monotonic() - died < 5, "the lock outlived the kernel by 5 s"
            time.sleep(0.05)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].startswith("Z")
    except FileNotFoundError:
        return False


def test_the_same_process_keeps_its_lock_when_it_runs_again(tmp_path):
    work = workdirs.prepare(tmp_path / "work")
    assert workdirs.prepare(work) == work  # "Run all" twice in one kernel
    assert workdirs.lock(work) is True


RECORDED = dict(dataset="mnist", batch_size=256, precision="mixed_float16")


def test_a_run_records_its_settings_and_resumes_only_with_the_same(tmp_path):
    run = workdirs.prepare(tmp_path / "run", "run_dir", fresh=False)
    assert workdirs.same_run(run, RECORDED) is False  # a new run: recorded
    assert json.loads((run / workdirs.RUN_FILE).read_text()) == RECORDED
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt-1000.index").write_bytes(b"three hours")
    assert workdirs.same_run(run, dict(RECORDED)) is True  # the same settings: resumed
    on_a_cpu = {**RECORDED, "precision": "float32"}
    with pytest.raises(RunSettingsChanged) as refused:
        workdirs.same_run(run, on_a_cpu)
    message = str(refused.value)
    assert "precision was 'mixed_float16', now 'float32'" in message and "\n" not in message
    assert "precision='mixed_float16'" in message and "fresh_start=True" in message
    assert "another run_dir" in message and "nothing was deleted" in message
    assert (run / "checkpoints" / "ckpt-1000.index").read_bytes() == b"three hours"
    assert json.loads((run / workdirs.RUN_FILE).read_text()) == RECORDED  # not overwritten
    fresh = workdirs.prepare(run, "run_dir", fresh=True)  # fresh_start=True: replaced
    assert workdirs.same_run(fresh, on_a_cpu) is False


def test_a_run_without_a_readable_record_of_its_settings_is_refused(tmp_path):
    run = workdirs.prepare(tmp_path / "run", "run_dir", fresh=False)
    (run / "checkpoints").mkdir()  # an older version's run: files, no run.json
    with pytest.raises(RunSettingsChanged, match=r"holds files \(checkpoints\) but no run\.json"):
        workdirs.same_run(run, RECORDED)
    assert not (run / workdirs.RUN_FILE).exists()
    (run / workdirs.RUN_FILE).write_text('{"dataset": "mni')  # cut short
    with pytest.raises(RunSettingsChanged, match="run.json could not be read"):
        workdirs.same_run(run, RECORDED)
    assert (run / workdirs.RUN_FILE).read_text() == '{"dataset": "mni'
    for other in ("[]", "null", '"x"', "3"):  # JSON, but not the settings' object
        (run / workdirs.RUN_FILE).write_text(other)
        with pytest.raises(RunSettingsChanged, match="run.json could not be read .*not the"):
            workdirs.same_run(run, RECORDED)
        assert (run / workdirs.RUN_FILE).read_text() == other


LOADED = dict(data="mnist", images=60000, batch_size=256, precision="mixed_float16")
STAND_IN = {**LOADED, "data": "digits (standing in for mnist)", "images": 1498}


def test_a_run_resumed_on_other_data_stops_naming_it(tmp_path):
    """Begun online on MNIST, resumed offline (Kaggle with Internet off), where the loader
    gives the digits stand-in: other data, under the same parameters, is another run."""
    run = workdirs.prepare(tmp_path / "run", "run_dir", fresh=False)
    assert workdirs.same_run(run, LOADED) is False
    with pytest.raises(RunSettingsChanged, match=r"data was 'mnist', now 'digits \(standing in"):
        workdirs.same_run(run, STAND_IN)
    assert json.loads((run / workdirs.RUN_FILE).read_text()) == LOADED


def test_a_record_from_before_the_data_was_recorded_stops_and_is_kept(tmp_path):
    run = workdirs.prepare(tmp_path / "run", "run_dir", fresh=False)
    older = dict(dataset="mnist", max_images=60000, batch_size=256, precision="mixed_float16")
    (run / workdirs.RUN_FILE).write_text(json.dumps(older))
    with pytest.raises(RunSettingsChanged, match=r"data was None, now 'mnist'.*nothing was del"):
        workdirs.same_run(run, LOADED)
    assert json.loads((run / workdirs.RUN_FILE).read_text()) == older  # kept


def test_where_the_file_system_has_no_locks_the_folder_is_used_and_it_says_so(
    tmp_path, monkeypatch, capsys
):
    def no_locks(*args):  # as on some network mounts
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr("fcntl.flock", no_locks)
    work = workdirs.prepare(tmp_path / "work")
    assert "cannot be locked here (No locks available)" in capsys.readouterr().out
    assert work.is_dir() and work.resolve() not in workdirs._HELD
    (work / "inner").mkdir()
    workdirs.prepare(work / "inner")  # a work folder inside: emptied with the outer one
    workdirs.prepare(work)
    assert not (work / "inner").exists()


TEN, FIVE = "10_tpu_pytorch_xla", "05_survive_a_disconnect"


def test_fresh_start_never_empties_another_notebooks_run(tmp_path):
    """Issue 48: 05 with fresh_start=True and 10's run_dir deleted 10's checkpoints."""
    runs = workdirs.prepare(tmp_path / "runs", "run_dir", fresh=False, notebook=FIVE)
    run = workdirs.prepare(runs / "xla_dcgan_run", "run_dir", fresh=False, notebook=TEN)
    (run / "step-0000003.pt").write_bytes(b"10's checkpoint")
    before = files(run)
    for fresh in (True, False):
        with pytest.raises(ParameterError, match=rf"xla_dcgan_run is {TEN}'s \(its .course_work"):
            workdirs.prepare(run, "run_dir", fresh=fresh, notebook=FIVE)
    with pytest.raises(ParameterError, match=f"xla_dcgan_run is {TEN}'s"):  # 10's run inside
        workdirs.prepare(runs, "run_dir", fresh=True, notebook=FIVE)
    assert files(run) == before
    workdirs._HELD.pop(run.resolve()).close()  # as if 10's kernel were another process:
    with pytest.raises(ParameterError, match=f"is {TEN}'s"):
        workdirs.prepare(run, "run_dir", fresh=True, notebook=FIVE)
    assert run.resolve() not in workdirs._HELD, "a refused folder is never locked (10 needs it)"
    workdirs.prepare(run, "run_dir", fresh=True, notebook=TEN)  # its own notebook may
    assert not (run / "step-0000003.pt").exists()
    assert f"made by: {TEN}\n" in (run / workdirs.MARKER).read_text()


@pytest.mark.parametrize("names, owner", [(["step-0000005.pt"], TEN),
                                          (["checkpoint", "ckpt-3.index", "run.json"], FIVE)])
def test_a_folder_marked_before_markers_named_a_notebook_is_judged_by_its_files(
        tmp_path, names, owner):
    run = tmp_path / "old_run"
    run.mkdir()
    (run / workdirs.MARKER).write_text(workdirs.MARKER_TEXT.format(made_by=""))
    for name in names:
        (run / name).write_text("kept")
    before = files(run)
    with pytest.raises(ParameterError, match=f"is {owner}'s"):
        workdirs.prepare(run, "run_dir", fresh=True, notebook=TEN if owner == FIVE else FIVE)
    assert files(run) == before
    workdirs.prepare(run, "run_dir", fresh=True, notebook=owner)
    assert not any((run / name).exists() for name in names)


@pytest.mark.parametrize("value", ["/dev/shm", "/proc", "/sys/kernel/new", "/run/course", "/var",
                                   "/var/lib/course", "/tmp", "/opt"])
def test_system_and_shared_folders_are_refused_in_one_line(value):
    with pytest.raises(ParameterError) as error:
        folder()("work_dir", value)
    assert str(error.value).startswith(f"Invalid parameter work_dir={value!r}: it is ")
    assert "system" in str(error.value) and "\n" not in str(error.value)


def test_a_name_longer_than_the_file_system_allows_is_refused_in_one_line(tmp_path):
    value = str(tmp_path / "runs" / ("x" * 300))
    with pytest.raises(ParameterError, match=r"is 300 bytes long, over this file system's limit"):
        folder()("run_dir", value)


def test_a_folder_inside_a_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(ParameterError, match=r"notes.txt is a file, so no folder can be made in"):
        folder()("work_dir", str(tmp_path / "notes.txt" / "runs" / "a"))


def in_mount_namespace(script: str, tmp_path) -> subprocess.CompletedProcess:
    """Shell ``script`` in a user and mount namespace of its own (mounts without privileges),
    in ``tmp_path``, with ``$PY`` this Python; skipped where the namespace is refused."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-Urm", "true"]).returncode:
        pytest.skip("unshare -Urm is refused here: no mount without privileges")
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run(["unshare", "-Urm", "sh", "-ec", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


PREPARE = """$PY -c 'import sys
from helpers import workdirs
try:
    workdirs.prepare(sys.argv[1], "work_dir", notebook="03_tfdata_pipelines")
except Exception as error:
    print(f"{type(error).__name__}: {error}")' "$@" """


def test_a_file_system_mounted_inside_is_never_reached_into(tmp_path):
    done = in_mount_namespace(f"""set -- work; {PREPARE}
        echo mine > work/data.txt; mkdir work/inner; mount -t tmpfs none work/inner
        echo theirs > work/inner/file; {PREPARE}; cat work/data.txt work/inner/file""", tmp_path)
    assert done.returncode == 0, done.stderr
    refused, kept = done.stdout.split("\n", 1)
    assert refused.startswith("ParameterError: Invalid parameter work_dir='work': a file system "
                              "is mounted inside it (work/inner)"), refused
    assert kept == "mine\ntheirs\n"


def test_a_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    done = in_mount_namespace(f"""mkdir shared; mount --bind shared shared
        mount -o remount,ro,bind shared; set -- shared/new; {PREPARE}""", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ParameterError: Invalid parameter work_dir='shared/new': "), (
        done.stdout)
    assert "shared is not writable by this user" in done.stdout and done.stdout.count("\n") == 1


def test_a_full_disk_is_said_in_one_line_and_leaves_nothing_partial(tmp_path):
    """run.json on a full disk: one line naming the folder and its free space, no .partial."""
    done = in_mount_namespace("""mkdir disk; mount -t tmpfs -o size=256k none disk
        $PY -c 'from helpers import workdirs; workdirs.prepare("disk/run", "run_dir", fresh=False)'
        dd if=/dev/zero of=disk/filler bs=4k 2>/dev/null || true
        $PY -c 'from helpers import workdirs
try:
    workdirs.same_run("disk/run", {"batch_size": 256, "notes": "x" * 65536})
except Exception as error:
    print(f"{type(error).__name__}: {error}")'
        ls -A disk/run""", tmp_path)
    assert done.returncode == 0, done.stderr
    said, left = done.stdout.split("\n", 1)
    assert said.startswith("DiskFull: The disk of disk/run is full (0.0 MiB free): the save "
                           "failed, what it had written was removed"), said
    assert sorted(left.split()) == sorted([workdirs.LOCK, workdirs.MARKER])
