"""MultiWorkerMirroredStrategy on local processes: the same training as one worker, and a run
that survives a killed worker. The workers run the script notebook 08 writes with its
``%%writefile`` cells (tools.course.worker_script), so these tests prove the notebook's code."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import data, processes, scale_out_profile
from helpers.devices import nvidia_smi
from helpers.errors import ChildTimeout, WorkersRefused
from tools import course

STEPS, EVERY = 40, 20
NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "08_scale_out_profile.ipynb"


def tf_config(addresses, index):
    """Notebook 08's (imported here, not at collection: the lesson module imports TensorFlow)."""
    from helpers.lessons.nb08 import tf_config

    return tf_config(addresses, index)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder per cluster run, each with the same training data."""
    images = data.load("mnist", limit=1024, verbose=False)

    def folder(name):
        path = tmp_path_factory.mktemp(name)
        scale_out_profile.write_data(path, images.x_train, images.y_train)
        (path / scale_out_profile.WORKER_FILE).write_text(course.worker_script(NOTEBOOK))
        return path

    return folder


#: the two-worker run's ports, and what a client at another address of this machine reached
PORTS: dict = {}


def first_outside_ipv4() -> str | None:
    """An IPv4 address of this machine other than loopback: another machine's way in."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return next((a for a in found if a.count(".") == 3 and not a.startswith("127.")), None)


def reaches(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def two_workers(work):
    def config(addresses, index):  # the notebook's TF_CONFIG; the ports it names, kept
        PORTS["named"] = {int(address.rsplit(":", 1)[1]) for address in addresses}
        return tf_config(addresses, index)

    def progress(attempt, step, loss):  # the chief has trained a step: every server is up
        if "reached" not in PORTS and (outside := first_outside_ipv4()):
            PORTS["reached"] = {port: reaches(outside, port) for port in PORTS["named"]}

    job = scale_out_profile.Job(workers=2, steps=STEPS, checkpoint_every=EVERY, learning_rate=0.005)
    return scale_out_profile.run_cluster(job, work("two"), tf_config=config, progress=progress)


@pytest.mark.heavy
def test_no_other_machine_reaches_the_workers(two_workers):
    """While the workers run (TensorFlow's servers listen on every interface), a client at this
    machine's own outside address, as another machine would connect, reaches none of their
    ports; as a control, the same client reaches a listener on 0.0.0.0 outside their
    namespace. The CI machine must make the namespace: this fails rather than skips."""
    outside = first_outside_ipv4()
    if outside is None:
        pytest.skip("this machine has no address besides loopback: nothing to reach from")
    assert scale_out_profile._workers_host().isolated, scale_out_profile._workers_host().refused
    assert len(PORTS["named"]) == 2 and PORTS["reached"] == dict.fromkeys(PORTS["named"], False)
    with socket.socket() as control:  # as TensorFlow's server does, but in this namespace
        control.bind(("0.0.0.0", 0))
        control.listen()
        assert reaches(outside, control.getsockname()[1]), "the control must be reachable"
    print(f"from {outside}: workers' ports {sorted(PORTS['named'])} unreachable; control reached")


class Host:
    """A stand-in for the workers' host: one that entered its namespace, or one refused."""

    def __init__(self, refused=None):
        self.refused, self.isolated = refused, refused is None


def test_the_workers_start_where_no_other_machine_reaches_them_or_need_open_ports(
    tmp_path, monkeypatch, capsys
):
    def exposure(open_ports, host):  # on a machine with that host
        monkeypatch.setattr(scale_out_profile, "_workers_host", lambda: host)
        return scale_out_profile.exposure(open_ports)

    refused = Host("this machine refuses a network namespace (EPERM)")
    said = exposure(False, Host())
    assert "network namespace of their own" in said and "no other machine" in said
    monkeypatch.setenv("COLAB_RELEASE_TAG", "x")  # a platform's label changes nothing
    refusal = r"^The workers were not started: .*every interface.*\(EPERM\)\. Set open_ports=True"
    with pytest.raises(WorkersRefused, match=refusal):
        exposure(False, refused)
    assert "open_ports=True accepts" in exposure(True, refused)
    assert scale_out_profile.workers_may_start(False) is False  # the notebook goes on
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "open_ports=True" in printed
    with pytest.raises(WorkersRefused):  # before anything starts
        scale_out_profile.run_cluster(scale_out_profile.Job(), tmp_path, tf_config=tf_config)
    assert list(tmp_path.iterdir()) == []


def test_the_worker_script_is_the_notebooks_writefile_cells_in_order():
    script = course.worker_script(NOTEBOOK)
    compile(script, "worker.py", "exec")  # one valid program, no magic left in it
    assert "%%" not in script and script.index("follow_launcher()") < script.index(
        "MultiWorkerMirroredStrategy("
    ) < script.index("strategy.run(") < script.index("while ")


def test_a_notebook_without_the_worker_cells_is_refused(tmp_path):
    (tmp_path / "nb.ipynb").write_text('{"cells": [{"cell_type": "code", "source": ["x = 1"]}]}')
    with pytest.raises(ValueError, match="writefile"):
        course.worker_script(tmp_path / "nb.ipynb")


def test_tf_config_names_the_cluster_and_the_worker():
    config = tf_config(["localhost:1", "localhost:2"], 1)
    assert config == {
        "cluster": {"worker": ["localhost:1", "localhost:2"]},
        "task": {"type": "worker", "index": 1},
    }
    assert len(set(processes.free_ports(3))) == 3


def test_local_workers_never_share_a_gpu_and_compared_runs_use_one_kind_of_device():
    assert scale_out_profile.worker_devices(2, 2) == (["0", "1"], "one GPU each")
    assert scale_out_profile.worker_devices(2, 4)[0] == ["0", "1"]
    assert scale_out_profile.worker_devices(2, 1) == (["-1", "-1"], "the CPU")
    assert scale_out_profile.worker_devices(1, 1) == (["-1"], "the CPU")  # the kernel's GPU
    assert scale_out_profile.worker_devices(1, 2, largest=4) == (["-1"], "the CPU")  # as 4 will
    assert scale_out_profile.worker_devices(1, 2, largest=2)[0] == ["0"]


@pytest.mark.heavy
def test_two_workers_train_like_one_worker_with_the_same_global_batch(work, two_workers):
    job = scale_out_profile.Job(workers=1, steps=STEPS, checkpoint_every=EVERY, learning_rate=0.005)
    one = scale_out_profile.run_cluster(job, work("one"), tf_config=tf_config)
    assert sorted(one.losses) == sorted(two_workers.losses) == list(range(1, STEPS + 1))
    # the same first batch from the same weights: the same loss, to float rounding
    assert two_workers.losses[1] == pytest.approx(one.losses[1], rel=1e-5)
    # later steps drift by rounding only (sums in another order), and end at the same loss
    last = range(STEPS - 9, STEPS + 1)
    mean_one = sum(one.losses[s] for s in last) / 10
    mean_two = sum(two_workers.losses[s] for s in last) / 10
    assert mean_two == pytest.approx(mean_one, rel=0.03)
    assert mean_one < 0.7 * one.losses[1], "the run must actually learn"
    assert one.images_per_s > 0 and two_workers.images_per_s > 0
    assert two_workers.device == scale_out_profile.worker_devices(2, len(nvidia_smi()))[1]


@pytest.mark.heavy
def test_a_killed_worker_resumes_from_the_last_checkpoint(work, two_workers):
    job = scale_out_profile.Job(
        workers=2, steps=STEPS, checkpoint_every=EVERY, learning_rate=0.005, kill=(1, 30)
    )
    seen = []
    run = scale_out_profile.run_cluster(job, work("killed"), progress=lambda *r: seen.append(r),
                                        tf_config=tf_config)
    assert len(run.attempts) == 2, [(a.exit_codes, a.resumed_from) for a in run.attempts]
    first, second = run.attempts
    assert -9 in first.exit_codes  # SIGKILL, as a vanished machine
    assert first.resumed_from == 0 and second.resumed_from == EVERY and second.exit_codes == [0, 0]
    # attempt 0 got past the checkpoint it resumed from, not past the kill (the chief's report
    # of step 30 itself may lose the race with the launcher ending the cluster)
    assert {a for a, _, _ in seen} == {0, 1}
    assert EVERY <= max(s for a, s, _ in seen if a == 0) <= 30
    # resumed at the checkpoint with the same data position: the uninterrupted run's losses
    for step in range(EVERY + 1, STEPS + 1):
        assert run.losses[step] == pytest.approx(two_workers.losses[step], rel=1e-5)
    lines = scale_out_profile.plot_recovery(run, two_workers, 30).axes[0].lines
    assert len(lines) == 4  # two curves, the kill and the checkpoint it resumed from
    assert lines[3].get_xdata()[0] == EVERY


@pytest.mark.heavy
def test_the_cluster_gives_up_after_its_restarts(work):
    job = scale_out_profile.Job(workers=2, steps=10, checkpoint_every=5, kill=(0, 3))
    with pytest.raises(RuntimeError, match="the cluster failed 1 times"):
        scale_out_profile.run_cluster(job, work("gives_up"), max_restarts=0,
            tf_config=tf_config)


def test_missing_data_or_script_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="write_data"):
        scale_out_profile.run_cluster(scale_out_profile.Job(), tmp_path,
            tf_config=tf_config)
    scale_out_profile.write_data(tmp_path, np.zeros((4, 2)), np.zeros(4))
    with pytest.raises(FileNotFoundError, match="writefile"):
        scale_out_profile.run_cluster(scale_out_profile.Job(), tmp_path,
            tf_config=tf_config)


FIT_WORKER = """
import numpy as np
from helpers.logs import import_tensorflow
tf = import_tensorflow()
from helpers import data_parallel, models
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x, y = np.zeros((256, 28, 28, 1), "uint8"), np.zeros(256, "int64")
with strategy.scope():
    model = data_parallel.compile_classifier(models.replica_classifier(synchronized=False))
try:
    model.fit(data_parallel.in_memory_dataset(x, y, 64), epochs=1, verbose=0)
    print("FIT OK")
except ValueError as error:
    print("FIT FAILED", str(error).splitlines()[0])
"""


@pytest.mark.heavy
def test_keras_fit_still_fails_under_the_strategy_as_notebook_07_says(tmp_path):
    """keras-team/keras#20585, seen on TF 2.20 + Keras 3.13.2 (Colab) and TF 2.21 + Keras 3.15.1.
    When this fails, Keras has fixed it: update notebook 08, which names those releases."""
    script = tmp_path / "fit_worker.py"
    script.write_text(FIT_WORKER)
    addresses = [f"localhost:{port}" for port in processes.free_ports(2)]
    workers = [
        processes.start_script(script, [], {**os.environ, "TF_CONFIG": json.dumps(
            tf_config(addresses, i))}, tmp_path / f"worker{i}.log")
        for i in range(2)
    ]
    for worker in workers:
        worker.join(timeout=300)
        if worker.exitcode is None:
            worker.kill()
    for i in range(2):
        output = (tmp_path / f"worker{i}.log").read_text()
        assert "FIT FAILED Attempt to convert a value (PerReplica" in output, output[-1500:]


@pytest.mark.heavy
def test_calling_again_on_the_same_folder_resumes_instead_of_starting_over(work):
    folder = work("again")
    job = scale_out_profile.Job(workers=1, steps=8, checkpoint_every=4)
    first = scale_out_profile.run_cluster(job, folder, tf_config=tf_config)
    # e.g. the notebook re-run after a disconnect
    again = scale_out_profile.run_cluster(job, folder, tf_config=tf_config)
    assert again.attempts[0].resumed_from == 8 and not any(again.attempts[0].exit_codes)
    assert again.losses == first.losses and again.images_per_s > 0


# -- no worker outlives its launcher (issue 14) --------------------------------------------

FAKE_WORKER = str(Path(__file__).parent / "scripts" / "fake_worker.py")


def gone(pid: int) -> bool:
    """True when no process ``pid`` is left (psutil may not be installed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too (only not yet reaped)
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def left(pids: list[int], wait_s: float = 60) -> list[int]:
    """The processes among ``pids`` still there after at most ``wait_s`` (a SIGKILL is sent at
    once but lands asynchronously, so a killed child can linger for a moment)."""
    deadline = time.monotonic() + wait_s
    while any(not gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if not gone(pid)]


def recorded_pids(folder: Path, workers: int) -> list[int]:
    """The workers' process ids and those of their own children, as the fake workers wrote."""
    return [int(p) for i in range(workers) for p in (folder / f"pids{i}").read_text().split()]


@pytest.fixture
def fake_workers(tmp_path):
    """A folder with data for cheap workers (FAKE_WORKER: no TensorFlow) that wait forever."""
    scale_out_profile.write_data(tmp_path, np.zeros((4, 2)), np.zeros(4))
    return tmp_path


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_cluster_leaves_no_process_behind(fake_workers, error):
    def interrupt(attempt, step, loss):  # as Jupyter's "interrupt" arrives while it waits
        raise error("stopped by the learner")

    with pytest.raises(error, match="stopped by the learner"):
        scale_out_profile.run_cluster(
            scale_out_profile.Job(workers=2), fake_workers, script=FAKE_WORKER, progress=interrupt,
            tf_config=tf_config)
    pids = recorded_pids(fake_workers, 2)
    assert len(pids) == 4 and not left(pids)  # the workers, and the children they started
    assert not scale_out_profile._LIVE


def test_a_cluster_that_times_out_says_so_and_is_not_restarted(fake_workers):
    with pytest.raises(ChildTimeout, match=r"^the cluster timed out after 3 s \(attempt 1 of 3\)"):
        scale_out_profile.run_cluster(scale_out_profile.Job(workers=2), fake_workers,
                                      script=FAKE_WORKER, tf_config=tf_config, timeout_s=3)
    pids = recorded_pids(fake_workers, 2)
    assert len(pids) == 4 and not left(pids) and not scale_out_profile._LIVE


LAUNCHER = """
import os, sys, time, threading
from pathlib import Path
import numpy as np
from helpers import processes, scale_out_profile
processes.PRELOAD.clear()  # the fake workers need no TensorFlow
folder, fake, how = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
scale_out_profile.write_data(folder, np.zeros((4, 2)), np.zeros(4))
config = lambda addresses, i: {"cluster": {"worker": addresses}, "task": {"index": i}}
run = lambda: scale_out_profile.run_cluster(scale_out_profile.Job(workers=2), folder, script=fake,
                                            tf_config=config)
if how == "exit":  # the kernel shuts down while a cell still runs the cluster
    os.environ["FAKE_WORKER_ALONE"] = "1"  # the workers do not watch: atexit must end them
    threading.Thread(target=run, daemon=True).start()
    while not (folder / "pids1").exists() or not (folder / "pids0").exists():
        time.sleep(0.05)
    sys.exit(0)
run()  # "kill": the test kills this process outright
"""


@pytest.mark.heavy
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_workers_end_when_their_launcher_ends(tmp_path, how):
    """At interpreter exit (atexit), and even when the launcher is killed outright (SIGKILL,
    no cleanup runs): then each worker notices its launcher is gone and ends its group."""
    env = {**os.environ, "PYTHONPATH": scale_out_profile.PACKAGE_ROOT}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path), FAKE_WORKER, how], env=env
    )
    try:
        deadline = time.monotonic() + 120  # waits for the workers to start; no speed asserted
        while not all((tmp_path / f"pids{i}").exists() for i in range(2)):
            assert launcher.poll() is None or how == "exit", "the launcher died early"
            assert time.monotonic() < deadline, "the fake workers never started"
            time.sleep(0.05)
        pids = recorded_pids(tmp_path, 2)
        if how == "kill":
            launcher.kill()
        assert launcher.wait(timeout=60) in (0, -signal.SIGKILL)
        assert not left(pids)
    finally:
        launcher.kill()
        for pid in recorded_pids(tmp_path, 2) if (tmp_path / "pids1").exists() else []:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_writefile_cells_take_a_work_dir_with_spaces(tmp_path):
    """08's cells quote the path (``%%writefile "{worker_py}"``): IPython splits an unquoted
    one at the space, and a learner's "My Drive/runs" would fail there."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    folder = tmp_path / "my runs"
    folder.mkdir()
    shell.user_ns["worker_py"] = str(folder / "worker.py")
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"]
             if course.WRITEFILE.match("".join(c["source"]).partition("\n")[0])]
    for cell in cells:
        head = "".join(cell["source"]).partition("\n")[0]
        assert shell.run_cell(f"{head}\nprint('hello')\n").success, head
    assert (folder / "worker.py").read_text() == "print('hello')\n" * len(cells)
