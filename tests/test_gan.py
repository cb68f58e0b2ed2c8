import hashlib
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import data, dcgan, survive_a_disconnect
from helpers.errors import ChildDied, DiskFull, RunSettingsChanged, RunUnreadable
from helpers.params import ParameterError

SCRIPTS = Path(__file__).parent / "scripts"


def test_precision_and_xla_per_device():
    assert dcgan.choose_precision("gpu") == "mixed_float16"
    assert dcgan.choose_precision("tpu") == "mixed_bfloat16"
    assert dcgan.choose_precision("cpu", "float32") == "float32"
    assert dcgan.choose_xla("gpu") and dcgan.choose_xla("tpu") and not dcgan.choose_xla("cpu")
    assert dcgan.choose_xla("cpu", "on") and not dcgan.choose_xla("gpu", "off")


@pytest.mark.parametrize(
    "architecture, shape",
    [("tutorial", (28, 28, 1)), ("dcgan", (32, 32, 3)), ("dcgan", (64, 64, 3))],
)
def test_architectures_make_the_right_images(tf, architecture, shape):
    from helpers.lessons.dcgan_networks import build_pair  # notebook 04's networks

    generator, discriminator = build_pair(architecture, shape, noise_dim=16)
    images = generator(np.zeros((2, 16), "float32"))
    assert images.shape == (2, *shape)
    assert discriminator(images).shape == (2, 1)


def test_wrong_shapes_are_refused(tf):
    from helpers.lessons.dcgan_networks import build_pair  # notebook 04's networks

    with pytest.raises(ValueError, match="architecture='tutorial'.*not make 32x32"):
        build_pair("tutorial", (32, 32, 3))
    with pytest.raises(ValueError, match="architecture='stylegan'.*allowed values"):
        build_pair("stylegan", (64, 64, 3))


def train(run, images, batch_size, epochs, steps_per_epoch, start=None, **kwargs):
    """Notebook 04's loop on notebook 05's batches, saving with 05's `save`, as 05 trains."""
    from helpers.lessons import nb05 as lesson

    start = int(run.step.numpy()) if start is None else start
    batches = lesson.run_batches(lesson.epoch_batches(images, batch_size), epochs,
                                 steps_per_epoch, start)
    return lesson.train(run, iter(batches), epochs, steps_per_epoch, save=lesson.save, **kwargs)


def run_script(fresh_process, *args, killed=False):
    done = fresh_process(script=SCRIPTS / "gan_kill_resume.py", args=args)
    assert done.returncode == (-signal.SIGKILL if killed else 0), done.output[-2000:]
    return done.output


def test_epoch_batches_depend_on_seed_and_epoch_only(tf):
    from helpers.lessons import nb05 as lesson

    images = np.arange(10 * 2 * 2, dtype="uint8").reshape(10, 2, 2, 1)
    make = lesson.epoch_batches(images, batch_size=4, seed=3)

    def firsts(dataset):  # each image's first pixel identifies it
        return [list(np.rint((b[:, 0, 0, 0].numpy() + 1) * 127.5).astype(int)) for b in dataset]

    epoch_1 = firsts(make(1))
    assert [len(b) for b in epoch_1] == [4, 4]  # full batches; the remainder is dropped
    assert len(set(sum(epoch_1, []))) == 8  # no image twice in an epoch
    assert firsts(make(tf.constant(1, tf.int64))) == epoch_1  # a tensor epoch: same order
    tf.random.set_seed(99)  # the global seed does not change it
    assert firsts(lesson.epoch_batches(images, 4, seed=3)(1)) == epoch_1
    assert firsts(make(2)) != epoch_1
    assert firsts(lesson.epoch_batches(images, 4, seed=4)(1)) != epoch_1


def lesson_run(tmp_path, policy="float32", d_steps=1):
    """Notebook 05's run (helpers.lessons.nb05.start_run) on the tutorial pair, 28x28."""
    from helpers.lessons import nb05 as lesson

    settings = dict(architecture="tutorial", policy=policy, xla=False, d_steps=d_steps,
                    directory=str(tmp_path))
    return lesson.start_run(settings, (28, 28, 1))


def test_run_batches_resume_exactly_where_the_run_stands(tf):
    """One stream for the rest of the run (an iterator per epoch cost seconds each time one
    was released): from step 3 it is the uninterrupted stream's tail, batch for batch."""
    from helpers.lessons import nb05 as lesson

    images = data.load("digits", limit=64, verbose=False)
    make = lesson.epoch_batches(images.x_train, 16, seed=1)
    whole = [b.numpy()[:, 0, 0, 0] for b in lesson.run_batches(make, 3, 4)]
    tail = [b.numpy()[:, 0, 0, 0] for b in lesson.run_batches(make, 3, 4, step=3)]
    assert len(whole) == 12 and len(tail) == 9
    for a, b in zip(whole[3:], tail, strict=True):
        np.testing.assert_array_equal(a, b)
    assert list(lesson.run_batches(make, 3, 4, step=12)) == []


def test_the_lesson_step_wraps_both_optimizers_for_float16_and_skips_non_finite_steps(tf):
    import keras

    from helpers.lessons import nb04 as lesson

    generator, discriminator, g, d = lesson.build_gan("tutorial", (28, 28, 1), "mixed_float16")
    assert generator.layers[0].compute_dtype == "float16"
    assert isinstance(g, keras.optimizers.LossScaleOptimizer)
    assert isinstance(d, keras.optimizers.LossScaleOptimizer)
    step = lesson.make_train_step(generator, discriminator, g, d, tf.random.Generator.from_seed(0))
    step(tf.random.uniform((4, 28, 28, 1), -1, 1))
    before = [v.numpy().copy() for v in discriminator.trainable_variables]
    scale = float(d.dynamic_scale)
    step(tf.fill((4, 28, 28, 1), float("nan")))  # non-finite gradients
    after = [v.numpy() for v in discriminator.trainable_variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert float(d.dynamic_scale) < scale  # the loss scale backed off


def test_the_lesson_step_draws_noise_at_the_batch_size_and_runs_d_steps(tf, tmp_path):
    from helpers.lessons import nb04 as lesson

    generator, discriminator, g, d = lesson.build_gan("tutorial", (28, 28, 1), "float32")
    step = lesson.make_train_step(generator, discriminator, g, d,
                                 tf.random.Generator.from_seed(0), d_steps=3)
    for batch in (7, 5):  # a short last batch must not crash or mismatch
        d_loss, g_loss = step(tf.zeros((batch, 28, 28, 1)))
        assert np.isfinite(float(d_loss)) and np.isfinite(float(g_loss))
    assert int(d.iterations) == 6 and int(g.iterations) == 2


def test_the_training_loop_counts_steps_on_the_host_and_reads_losses_in_batches(tf, tmp_path):
    """No step waits for the one before: the device's step is read once per train(), and
    losses are read back every read_back steps, at checkpoints and at epoch ends."""

    images = data.load("digits", limit=128, verbose=False)
    run = lesson_run(tmp_path)
    dispatched, reads, device_reads = [], [], []

    class Loss:  # a loss whose read-back is noted, with the steps dispatched by then
        def __init__(self, value):
            self.value = value

        def __float__(self):
            reads.append(len(dispatched))
            return float(self.value)

    def counted_step(batch):
        dispatched.append(1)
        return tuple(Loss(v) for v in run.train_step(batch))

    variable = run.step

    class Step:  # the step variable, its read-backs counted
        def numpy(self):
            device_reads.append(1)
            return variable.numpy()

        def assign(self, value):
            return variable.assign(value)

    run.step = Step()
    final = train(run, images.x_train, 2, 1, 45, start=0, every=30,
                        step_fn=counted_step)
    assert final == 45 and len(device_reads) == 1 and int(variable) == 45
    assert sorted(set(reads)) == [20, 30, 45]  # 20 queued, a checkpoint, the epoch's end
    assert [row[0] for row in run.history.losses] == list(range(1, 46))
    assert [Path(p).name for p in run.manager.checkpoints] == ["ckpt-30", "ckpt-45"]
    assert run.history.epochs[0]["step"] == 45


def test_a_deadline_stops_the_run_at_an_epoch_end_just_saved(tf, tmp_path):
    """A session whose budget is spent ends on a checkpoint at an epoch's end, never mid-epoch;
    with time left it trains every epoch asked for."""

    images = data.load("digits", limit=64, verbose=False)
    run = lesson_run(tmp_path)
    final = train(run, images.x_train, 16, 3, 2, every=100,
                         deadline=time.time())  # already spent: one epoch, then stop
    assert final == 2 and saved(run) == ["ckpt-2"]
    assert [row["epoch"] for row in run.history.epochs] == [1]
    resumed = lesson_run(tmp_path)  # the next session
    final = train(resumed, images.x_train, 16, 3, 2, every=100,
                         deadline=time.time() + 3600)
    assert final == 6 and [row["epoch"] for row in resumed.history.epochs] == [1, 2, 3]


@pytest.mark.parametrize(("saved", "seconds", "budget", "share", "die_at", "says"), [
    (0, 60, 3600, 50, 256, "they fit in the budget (60 min): this session trains them all"),
    (0, 300, 1800, 6, 36, "the budget (30 min) fits 6: this session trains to epoch 6 of 50"),
    (60, 300, 1800, 12, 96, "this session trains to epoch 12 of 50"),  # the next session
    (70, 300, 1800, 13, 106, "the 43 epoch(s) left about 215 min"),  # killed mid-epoch 8
    (240, 300, 1800, 30, 256, "this session trains to epoch 30 of 50"),  # dies past halfway
    (250, 60, 3600, 50, None, "this session trains them all"),  # at halfway: no child
    (0, 300, 0, 1, 6, "the budget (0 s) is shorter than one epoch, so this session trains to "
                      "epoch 1 of 50 (one epoch at least), and a re-run"),
    (500, 60, 3600, 50, None, "the run is complete."),
])
def test_a_session_trains_the_epochs_its_budget_fits(saved, seconds, budget, share, die_at,
                                                     says):
    session = survive_a_disconnect.plan_session(saved, 10, 50, seconds, budget, 25)  # 10 a epoch
    assert (session.epochs, session.die_at) == (share, die_at)  # it trains to die_at - 1, which
    if die_at:  # lies between two saves (every 25 steps and each epoch's end): steps are lost
        assert (die_at - 1) % 25 and (die_at - 1) % 10
    assert says in session.line, session.line


def test_a_gif_needs_at_least_one_grid(tmp_path):
    with pytest.raises(ParameterError, match=r"grids=\[\]: no epoch grids to animate"):
        dcgan.make_gif([], tmp_path / "progress.gif")
    assert not (tmp_path / "progress.gif").exists()


@pytest.mark.heavy
def test_killed_and_resumed_run_ends_with_the_same_weights(tmp_path, fresh_process):
    """A process SIGKILLed mid-epoch, resumed by another from its checkpoint, ends where an
    uninterrupted run does (notebook 04's own step, checkpoint and loop)."""
    run_script(fresh_process, tmp_path / "straight", 0, tmp_path / "straight.npz")
    # saves at steps 3, 4 (end of epoch 1) and 6, dies before step 8, mid-epoch
    run_script(fresh_process, tmp_path / "killed", 8, tmp_path / "killed.npz", killed=True)
    out = run_script(fresh_process, tmp_path / "killed", 0, tmp_path / "resumed.npz")
    assert "Resumed from ckpt-6 at step 6." in out
    straight, resumed = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert int(straight["step"]) == int(resumed["step"]) == 8
    for key in straight.files:
        np.testing.assert_array_equal(straight[key], resumed[key], err_msg=key)


def saved(run):
    return [Path(p).name for p in run.manager.checkpoints]


def damage(checkpoint):
    for part in Path(checkpoint).parent.glob(Path(checkpoint).name + ".data-*"):
        part.write_bytes(b"\0" * 64)


@pytest.fixture(scope="module")
def three_steps(tf, tmp_path_factory):
    """A run's folder after 3 steps, a checkpoint each: the resume tests below each damage a
    copy of it (training it again cost each of them seconds)."""
    folder = tmp_path_factory.mktemp("three_steps")
    images = data.load("digits", limit=64, verbose=False)
    run = lesson_run(folder)
    train(run, images.x_train, 16, 1, 3, every=1)
    assert saved(run) == ["ckpt-1", "ckpt-2", "ckpt-3"]
    return folder


def copy_run(folder, tmp_path):
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)


def test_a_corrupt_latest_checkpoint_falls_back_and_no_good_one_is_pruned(tf, tmp_path, capsys,
                                                                          three_steps):

    images = data.load("digits", limit=64, verbose=False)
    copy_run(three_steps, tmp_path)
    damage(tmp_path / "checkpoints" / "ckpt-3")
    capsys.readouterr()
    resumed = lesson_run(tmp_path)
    assert "ckpt-3 could not be read" in capsys.readouterr().out
    assert int(resumed.step) == 2 and resumed.history.losses[-1][0] == 2
    train(resumed, images.x_train, 16, 2, 3, every=1)
    names = {p.name.split(".")[0] for p in (tmp_path / "checkpoints").glob("ckpt-*.index")}
    assert names == {f"ckpt-{n}" for n in range(1, 7)}, "the good ckpt-1 and ckpt-2 were kept"
    again = lesson_run(tmp_path)  # the next session resumes from the newest, and prunes again
    assert int(again.step) == 6 and again.manager._max_to_keep == 3


def test_a_checkpoint_of_other_settings_stops_the_run_and_all_survive(tf, tmp_path):
    """The second line of defence behind run.json (helpers.workdirs.same_run): a checkpoint
    that reads but holds other variables is another run's, never "corrupt"."""

    images = data.load("digits", limit=64, verbose=False)
    run = lesson_run(tmp_path, policy="mixed_float16")  # a GPU session's run
    train(run, images.x_train, 2, 1, 3, every=1)  # float16 on a CPU is slow: batches of 2
    before = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints").iterdir()}
    with pytest.raises(RunSettingsChanged, match="ckpt-3 holds other variables .*nothing was "
                                                 "deleted"):
        lesson_run(tmp_path, policy="float32")  # back on a CPU: no loss scale
    after = {p.name: p.read_bytes() for p in (tmp_path / "checkpoints").iterdir()}
    assert after == before


def test_a_run_whose_checkpoints_are_all_unreadable_stops(tf, tmp_path, three_steps):

    copy_run(three_steps, tmp_path)
    for number in (1, 2, 3):
        damage(tmp_path / "checkpoints" / f"ckpt-{number}")
    with pytest.raises(RunUnreadable, match="no checkpoint in .* could be read; nothing was"):
        lesson_run(tmp_path)
    indexes = sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.index"))
    assert indexes == ["ckpt-1.index", "ckpt-2.index", "ckpt-3.index"]


@pytest.mark.parametrize("index", ["deleted", "garbled", "emptied"])
def test_a_run_whose_index_file_is_lost_resumes_from_its_files_and_overwrites_none(
    tf, tmp_path, capsys, index, three_steps
):
    """Drive's sync, or a copy of the ckpt-* files alone, loses or damages the index file
    (``checkpoint``): the run resumes from its newest checkpoint file, never starts over, and
    every old file stays byte for byte as it was."""

    images = data.load("digits", limit=64, verbose=False)
    copy_run(three_steps, tmp_path)
    folder = tmp_path / "checkpoints"
    {"deleted": lambda p: p.unlink(), "garbled": lambda p: p.write_text("garbage {{{ \0"),
     "emptied": lambda p: p.write_text("")}[index](folder / "checkpoint")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    resumed = lesson_run(tmp_path)
    said = capsys.readouterr().out
    assert "Resumed from ckpt-3 at step 3." in said and "a new run" not in said
    assert int(resumed.step) == 3 and resumed.history.losses[-1][0] == 3
    index_file = folder / "checkpoint"
    if index == "emptied":  # set aside, not deleted
        assert [p.read_bytes() for p in folder.glob("checkpoint.unreadable-*")] == [b""]
        before.pop(index_file)
    assert {p: p.read_bytes() for p in before} == before, "resuming changed a file"
    train(resumed, images.x_train, 16, 2, 3, every=1)
    for path, content in before.items():  # the old checkpoints, after training on
        if path.name.startswith("ckpt-"):
            assert path.read_bytes() == content, f"{path.name} was overwritten"
    names = {p.name.split(".")[0] for p in folder.glob("ckpt-*.index")}
    assert names == {f"ckpt-{n}" for n in range(1, 7)}, "nothing pruned, nothing started over"


def test_history_grids_gif_and_plot(tf, tmp_path):

    images = data.load("digits", limit=64, verbose=False)
    run = lesson_run(tmp_path)
    train(run, images.x_train, 16, 2, 2, every=100)
    assert [row[0] for row in run.history.losses] == [1, 2, 3, 4]
    assert [row["epoch"] for row in run.history.epochs] == [1, 2]
    grids = run.history.grids()
    assert all(g.exists() for g in grids)
    gif = dcgan.make_gif(grids, tmp_path / "progress.gif")

    assert Image.open(gif).n_frames == 2
    assert len(dcgan.plot_history(run.history.as_dict(), marks={"resumed": 2}).axes) == 3
    verdicts = [(0, 0.5, 0.5), (2, 0.75, 0.25)]  # (step, D on real, D on generated): 04's panel
    figure = dcgan.plot_history(run.history.as_dict(), verdicts=verdicts)
    assert [len(line.get_xdata()) for line in figure.axes[0].lines[:2]] == [2, 2]


DAMAGED_HISTORIES = {  # history.json as a disconnect mid-write, or an edit, can leave it
    "truncated": b'{"losses": [[1',
    "a list": b"[]",
    "short rows": b'{"losses": [[1, 0.69]], "epochs": []}',
    "a text step": b'{"losses": [["1", 0.69, 0.69]], "epochs": []}',
    "epoch rows": b'{"losses": [], "epochs": [[2]]}',
    "an epoch row without its grid": b'{"losses": [], "epochs": [{"step": 1, "epoch": 1}]}',
    "an epoch row without its number": b'{"epochs": [{"step": 1, "grid": "epoch_0001.png"}]}',
    "not text": b"\xff\xfe\x00history",
}


def test_an_epochs_line_projects_the_steps_left_at_its_own_pace(tmp_path, capsys):
    """A resumed epoch timed only the steps this process trained (05: 2 of 4, tracing
    included): the time left is that pace a step, times the steps left, not epochs x seconds."""
    history = dcgan.History(tmp_path)
    history.load(2)  # resumed at step 2, in the first epoch of 4 steps
    generator = lambda noise, training: np.zeros((16, 8, 8, 1))  # noqa: E731
    history.end_epoch(generator, 0, 4, 1.0, 64, epochs=3)
    assert "; 2 step(s) in 1.0 s, so about 4.0 s for the 8 step(s) left" in (
        capsys.readouterr().out)
    history.end_epoch(generator, 1, 8, 2.0, 128, epochs=3)  # a whole epoch: its 4 steps
    assert capsys.readouterr().out.endswith("; 4 step(s) in 2.0 s, so about 2.0 s for the 4 "
                                            "step(s) left\n")
    history.end_epoch(generator, 2, 12, 2.0, 128, epochs=3)  # the last: nothing left to project
    assert "left" not in capsys.readouterr().out


@pytest.mark.parametrize("content", DAMAGED_HISTORIES.values(), ids=DAMAGED_HISTORIES)
def test_a_damaged_history_is_set_aside_never_raised(tmp_path, capsys, content):
    history = dcgan.History(tmp_path)
    history.path.write_bytes(content)
    history.load(3)
    [aside] = tmp_path.glob("history.json.unreadable-*")
    assert aside.read_bytes() == content and not history.path.exists()  # renamed, not deleted
    assert history.losses == [] and history.epochs == []
    assert capsys.readouterr().out == (
        "WARNING: the loss history up to step 3 could not be read; it was set aside as "
        f"{aside.name}, and the run goes on from its checkpoint without it.\n")


def test_a_run_whose_history_is_damaged_resumes_from_its_checkpoints(tf, tmp_path, capsys,
                                                                     three_steps):
    images = data.load("digits", limit=64, verbose=False)
    copy_run(three_steps, tmp_path)
    (tmp_path / "history.json").write_text('{"losses": [[1')  # a disconnect mid-write
    before = {p: p.read_bytes() for p in (tmp_path / "checkpoints").iterdir()}
    capsys.readouterr()
    resumed = lesson_run(tmp_path)
    said = capsys.readouterr().out
    assert "Resumed from ckpt-3 at step 3.\nWARNING: the loss history up to step 3 " in said
    assert {p: p.read_bytes() for p in before} == before
    train(resumed, images.x_train, 16, 2, 3, every=1)
    assert [row[0] for row in resumed.history.losses] == [4, 5, 6]
    [aside] = tmp_path.glob("history.json.unreadable-*")
    assert aside.read_text() == '{"losses": [[1'


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def on_a_small_disk(tmp_path, size: str, code: str) -> str:
    """Python ``code`` run with ``tmp_path/disk`` a tmpfs of ``size`` (in a user and mount
    namespace of its own: no privileges needed) and ``tmp_path`` its second argument; what the
    disk held at the end is copied to ``tmp_path/after``. Returns stdout and stderr."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here (util-linux) to make a small disk")
    refused = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, text=True)
    if refused.returncode:
        pytest.skip(f"no user namespace here for a small disk: {refused.stderr.strip()}")
    (tmp_path / "disk").mkdir()
    (tmp_path / "script.py").write_text(textwrap.dedent(code))
    shell = ('mount -t tmpfs -o size="$1" none "$2/disk" || exit 97; '
             '"$3" "$2/script.py" "$2/disk" "$2"; status=$?; cp -R "$2/disk" "$2/after"; '
             'exit $status')
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", shell, "sh", size, tmp_path,
                           sys.executable], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    if done.returncode == 97:
        pytest.skip(f"no tmpfs can be mounted here: {done.stdout.strip()}")
    assert done.returncode == 1 and "Traceback" not in done.stdout, done.stdout[-3000:]
    return done.stdout


def test_a_full_disk_stops_the_history_and_grid_saves_in_one_line(tmp_path):
    said = on_a_small_disk(tmp_path, "256k", """
        import sys
        from pathlib import Path

        import numpy as np

        from helpers import dcgan, survive_a_disconnect
        from helpers.errors import DiskFull

        history = dcgan.History(sys.argv[1])
        history.losses = [[1, 0.69, 0.69]]
        history.save()  # the history saved before the disk filled up
        with open(Path(sys.argv[1]) / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(bytes(4096))
            except OSError:
                pass
        history.losses.append([2, 0.7, 0.7])
        try:
            history.save()
        except DiskFull as error:
            print(f"DiskFull: {error}", flush=True)
        generator = lambda noise, training: np.zeros((16, 8, 8, 1))  # noqa: E731
        survive_a_disconnect.run_child(history.end_epoch, generator, 0, 2, 1.0, 32)  # a grid
    """)
    disk, after = tmp_path / "disk", tmp_path / "after"
    for line in said.splitlines()[-2:]:  # the history's save, then the grid's
        assert line.startswith(f"DiskFull: The disk of {disk} is full (0.0 MiB free)"), said
    assert list((after / "grids").iterdir()) == []  # no partial grid
    assert (after / "history.json").read_text() == '{"losses": [[1, 0.69, 0.69]], "epochs": []}'
    assert not (after / "history.tmp").exists()


@pytest.mark.heavy
def test_a_full_disk_stops_a_checkpoint_in_one_line_and_leaves_the_run_intact(tmp_path):
    """Notebook 05's save, in a child as 05 runs it (run_child), on a disk that fills at the
    third checkpoint (each holds 30 MB): its one line and no traceback, nothing of the failed
    save left, every file saved before byte for byte, and the kernel's error the same line."""
    said = on_a_small_disk(tmp_path, "60m", """
        import hashlib, json, sys
        from pathlib import Path

        from helpers import data, survive_a_disconnect
        from helpers.logs import import_tensorflow

        tf = import_tensorflow()
        from helpers.lessons import nb05 as lesson

        disk, saved = Path(sys.argv[1]), Path(sys.argv[2]) / "saved.json"
        images = data.load("digits", limit=64, verbose=False)
        settings = dict(architecture="tutorial", policy="float32", xla=False, d_steps=1,
                        directory=str(disk))
        run = lesson.start_run(settings, (28, 28, 1))

        def save(run, step):  # 05's save, then what the disk holds
            lesson.save(run, step)
            saved.write_text(json.dumps({str(p.relative_to(disk)): hashlib.sha256(
                p.read_bytes()).hexdigest() for p in disk.rglob("*") if p.is_file()}))

        def main():
            batches = lesson.run_batches(lesson.epoch_batches(images.x_train, 16), 1, 4)
            lesson.train(run, iter(batches), 1, 4, save=save, every=1)

        survive_a_disconnect.run_child(main)
    """)
    last, after = said.strip().splitlines()[-1], tmp_path / "after"
    folder = tmp_path / "disk" / "checkpoints"
    assert last.startswith(f"DiskFull: The disk of {folder} is full (0.0 MiB free): the save "
                           "failed, what it had written was removed"), said[-3000:]
    saved = json.loads((tmp_path / "saved.json").read_text())
    assert "checkpoints/ckpt-2.index" in saved and not any("ckpt-3" in name for name in saved)
    left = {str(p.relative_to(after)): sha256(p) for p in after.rglob("*") if p.is_file()}
    assert left == saved, "the failed save left a file, or changed one saved before"
    assert not [*after.rglob("*_temp*"), *after.rglob("*.tmp*")]
    error = survive_a_disconnect.child_error(last + "\n", otherwise="the child ended")
    assert type(error) is DiskFull and f"{type(error).__name__}: {error}" == last


def test_the_kernel_raises_the_error_a_child_ended_with_or_child_died():
    error = survive_a_disconnect.child_error("RunUnreadable: no checkpoint in x could be read\n",
                                             otherwise="the child process ended with 1")
    assert type(error) is RunUnreadable and str(error) == "no checkpoint in x could be read"
    error = survive_a_disconnect.child_error("ValueError: a crash\n", otherwise="it ended with 1")
    assert type(error) is ChildDied and str(error) == "it ended with 1"


def test_the_ablation_times_each_change_in_turn_and_skips_what_does_not_apply(tf):
    from helpers.lessons import nb04 as lesson

    rows = lesson.ablation_rows("float32", False, batch_size=8)
    assert list(rows) == ["TF tutorial's step, as published", "+ the course's step", "+ float32",
                          "+ XLA", "+ data on the device", "+ batch 16"]
    assert rows["+ float32"] is None and rows["+ XLA"] is None  # float32, XLA off
    larger = rows["+ batch 16"]  # one change on the row above: the batch, fed as that row is
    above = rows["+ data on the device"] or rows["+ the course's step"]
    assert type(larger[1]) is type(above[1])  # on a CPU, both a tf.data iterator's on the host
    assert larger[1]().shape[0] == 16 and above[1]().shape[0] == 8
    rates = lesson.time_rows(rows, rounds=2, steps=1)
    assert list(rates) == [name for name, row in rows.items() if row]
    assert all(len(r) == 2 and min(r) > 0 for r in rates.values())
    table = dcgan.ablation_table(rows, rates)
    assert "not applicable" in str(table.rows[2]) and table.rows[0][2] == "baseline"
    assert table.rows[1][2].endswith("too few rounds (2) to tell: pass rounds >= 5")


def test_the_ablation_judges_each_row_by_its_rounds_against_the_tutorial_and_the_row_above():
    rows = dict.fromkeys(["tutorial", "course", "XLA", "larger batch", "unused"], ())
    rows["unused"] = None
    rates = {"tutorial": [100, 110, 90, 100, 105], "course": [200, 220, 180, 200, 210],
             "XLA": [210, 200, 200, 190, 220], "larger batch": [100, 100, 100, 100, 100]}
    table = dcgan.ablation_table(rows, rates)
    assert table.rows[0] == ["tutorial", "100 (90-110)", "baseline", ""]
    assert table.rows[1][1:] == ["200 (180-220)", "2.00x (2.00-2.00x), faster in every round",
                                 "2.00x (2.00-2.00x), faster in every round"]
    assert table.rows[2][3] == ("1.05x (0.91-1.11x), no clear difference (the rounds disagree, "
                                "or come within 3%)")
    assert table.rows[3][3].endswith("slower in every round")
    assert table.rows[4] == ["unused", "not applicable with this device's settings", "", ""]
    assert "median (min-max)" in table.headers[1] and "last row that ran" in table.headers[3]
    skipped = dict(zip(["tutorial", "unused", "course"], ((), None, ()), strict=True))
    table = dcgan.ablation_table(skipped, {"tutorial": [100] * 5, "course": [200] * 5})
    assert table.rows[2][3].startswith('against "tutorial": 2.00x')  # the row above did not run
    rates = {name: values[:3] for name, values in rates.items()}  # three rounds: no verdict
    assert dcgan.ablation_table(rows, rates).rows[1][2].endswith("too few rounds (3) to tell: "
                                                                 "pass rounds >= 5")


def test_score_ranks_real_images_above_noise(tf, tmp_path):
    images = data.load("digits", verbose=False)

    def scorer():
        return dcgan.Scorer(
            images.x_train,
            images.y_train,
            images.x_test,
            10,
            tmp_path,
            "digits",
            epochs=4,
            verbose=False,
        )

    first = scorer()
    noise = np.random.default_rng(0).uniform(-1, 1, (300, 28, 28, 1)).astype("float32")
    fake = first.score(noise)
    assert first.real["inception_score"] > fake["inception_score"] + 1
    assert first.real["frechet_distance"] < fake["frechet_distance"] / 2
    again = scorer()  # loads the cached classifier
    assert again.real["inception_score"] == pytest.approx(first.real["inception_score"])
    [cache] = tmp_path.glob("scorer_*.weights.h5")
    cache.write_bytes(cache.read_bytes()[:200])  # a disconnect while it was written
    mended = scorer()  # trains again, and caches it whole
    assert mended.real["inception_score"] == pytest.approx(first.real["inception_score"])
    assert [p.name for p in tmp_path.iterdir()] == [cache.name]  # no partial file left
    assert scorer().real["inception_score"] == pytest.approx(first.real["inception_score"])


def test_frechet_distance_on_a_singular_covariance_is_finite():
    """Two feature vectors of 7 values: rank-deficient covariances whose product has no
    finite square root (sqrtm gives inf/NaN; the distance used to be NaN). The reference
    guard adds eps to the diagonals; checked here against the same figure computed another
    way (eigenvalues of the symmetric A^1/2 B A^1/2)."""
    a = np.array([[2, 0, 1, 0, 2, 0, 2], [1, 2, 0, 0, 0, 2, 0]], dtype="float64")
    b = np.array([[2, 1, 2, 0, 1, 1, 0], [2, 1, 2, 1, 2, 1, 2]], dtype="float64")
    distance = dcgan.frechet_distance(a, b)
    assert np.isfinite(distance)
    eps = 1e-6
    cov_a = np.cov(a, rowvar=False) + eps * np.eye(7)
    cov_b = np.cov(b, rowvar=False) + eps * np.eye(7)
    w, v = np.linalg.eigh(cov_a)
    root_a = v @ np.diag(np.sqrt(np.clip(w, 0, None))) @ v.T
    trace_root = np.sum(np.sqrt(np.clip(np.linalg.eigvalsh(root_a @ cov_b @ root_a), 0, None)))
    expected = np.sum((a.mean(0) - b.mean(0)) ** 2) + np.trace(cov_a + cov_b) - 2 * trace_root
    assert distance == pytest.approx(expected, rel=1e-3, abs=1e-3)


def test_frechet_distance_of_a_set_to_itself_is_zero_and_one_vector_is_refused():
    x = np.random.default_rng(0).standard_normal((400, 5))
    assert dcgan.frechet_distance(x, x) == pytest.approx(0, abs=1e-6)
    assert dcgan.frechet_distance(x, x + 1) == pytest.approx(5, rel=1e-6)  # means apart
    with pytest.raises(ValueError, match="at least 2 feature vectors"):
        dcgan.frechet_distance(x[:1], x)


def test_inception_score_bounds():
    assert dcgan.inception_score(np.full((10, 4), 0.25)) == pytest.approx(1.0)
    assert dcgan.inception_score(np.eye(4)) == pytest.approx(4.0)


def test_architecture_follows_the_image_size():
    assert dcgan.architecture_for((28, 28, 1)) == "tutorial"
    assert dcgan.architecture_for((32, 32, 3)) == "dcgan"
    rule = dcgan.architecture_rule((32, 32, 3))
    assert rule("architecture", "dcgan") == "dcgan"
    with pytest.raises(ParameterError, match="does not make 32x32 images"):
        rule("architecture", "tutorial")
    with pytest.raises(ParameterError, match="allowed values"):
        rule("architecture", "stylegan")


def test_drive_only_on_colab_and_by_default_there(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(survive_a_disconnect, "detect_platform", lambda: "local")
    assert survive_a_disconnect.run_directory("runs/a") == Path("runs/a")
    assert survive_a_disconnect.run_directory("runs/a", use_drive="auto") == Path("runs/a")
    assert "disconnect" not in capsys.readouterr().out
    parameters = dict(dataset="digits", architecture="auto", epochs=1, budget_min=1, batch_size=8,
                      d_steps=1, precision="auto", xla="auto", max_images=64, checkpoint_every=1,
                      run_dir="runs/a", use_drive=True, fresh_start=False)
    with pytest.raises(ParameterError, match="use_drive=True: Google Drive can only be used on"):
        survive_a_disconnect.check_parameters(**parameters)  # 05's validation cell, first
    monkeypatch.setattr(survive_a_disconnect, "detect_platform", lambda: "colab")
    assert survive_a_disconnect.run_directory("runs/a", use_drive=False) == Path("runs/a")
    assert "does not survive a disconnect" in capsys.readouterr().out
    mounted = []
    colab = types.ModuleType("google.colab")
    colab.drive = types.SimpleNamespace(mount=mounted.append)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    where = survive_a_disconnect.run_directory("runs/a", use_drive="auto")
    assert where == Path("/content/drive/MyDrive/runs/a")
    assert mounted == ["/content/drive"] and "survives a disconnect" in capsys.readouterr().out
