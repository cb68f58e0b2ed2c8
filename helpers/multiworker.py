"""Plumbing for notebook 07's workers: ``MultiWorkerMirroredStrategy`` over loopback.

The worker itself (``TF_CONFIG`` read, the strategy, the data set, the custom loop with
``strategy.run``, the chief's checkpoints) is written out in notebook 07's ``%%writefile`` cells,
which save it as ``worker.py``; ``tools.course.worker_script`` reads those cells back, so
that the tests and ``make bench`` run the very script the notebook shows. This module only
launches it:
:func:`run_cluster` starts one Python process per worker, each with its own ``TF_CONFIG`` (from
``helpers.lessons.scale_out_profile.tf_config``, shown in the notebook), watches them, and
collects what the chief reports (:func:`report_step`).

Recovery: when a worker dies, the others would wait for it in the next all-reduce, so the
launcher stops them all and starts the cluster again; the script restores the chief's newest
checkpoint.

No worker outlives its launcher: :func:`run_cluster` stops them all (each worker's whole process
group, with SIGKILL) on any exit, an exception or ``KeyboardInterrupt`` (Jupyter's "interrupt")
included; an ``atexit`` hook does it when the kernel shuts down; and each worker ends itself
when the launching process is gone (:func:`follow_launcher`; a kernel killed outright runs no
``atexit``).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

DATA_FILE = "data.npz"
JOB_FILE = "job.json"
PROGRESS_FILE = "progress.jsonl"
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
LAUNCHER_ENV = "COURSE_LAUNCHER_PID"  # a worker ends itself when this process is gone
WORKER_FILE = "worker.py"


@dataclasses.dataclass
class Job:
    """What every worker trains, and how."""

    workers: int = 2
    global_batch: int = 64
    steps: int = 60
    checkpoint_every: int = 20
    learning_rate: float = 0.005  # SGD; larger rates made the first steps unstable here
    seed: int = 0
    #: ``(worker, step)``: that worker kills itself (SIGKILL) when it reaches that step, in
    #: the first attempt only, as a preempted machine would vanish
    kill: tuple[int, int] | None = None
    #: seconds a worker waits for the others in a collective before it gives up
    collective_timeout_s: float = 120.0


@dataclasses.dataclass
class Attempt:
    """One start of the cluster."""

    number: int
    resumed_from: int  # the checkpoint step it started from (0: from scratch)
    exit_codes: list[int]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.exit_codes)


@dataclasses.dataclass
class ClusterResult:
    """What the cluster did: the attempts, the loss per step, and timing."""

    workers: int
    global_batch: int
    attempts: list[Attempt]
    losses: dict[int, float]  # step -> loss (the last attempt's value where steps repeat)
    step_seconds: list[float]  # per step of the last attempt, after its first
    seconds: float  # wall clock for everything, process starts included
    logs: dict[str, str]
    device: str = ""  # what the workers ran on

    @property
    def images_per_s(self) -> float:
        """Steady-state training images/s: the global batch over the median step time."""
        return self.global_batch / float(np.median(self.step_seconds))

    @property
    def final_loss(self) -> float:
        return self.losses[max(self.losses)]


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports that are free on this machine now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("localhost", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def worker_devices(workers: int, gpus: int) -> tuple[list[str], str]:
    """``CUDA_VISIBLE_DEVICES`` for each worker, and what they run on: one GPU each where there
    are enough, else the CPU. Local workers must not share one GPU: each TensorFlow process
    takes most of a GPU's memory, so the second would run out."""
    if gpus >= workers:
        return [str(i) for i in range(workers)], f"{workers} worker(s), one GPU each"
    return ["-1"] * workers, f"{workers} worker(s) on the CPU"


def write_data(work_dir, x, y) -> Path:
    """Save the training arrays once where every worker reads them (a shared disk or bucket
    on real machines), so that workers do not each download them."""
    path = Path(work_dir) / DATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x=x, y=y)
    return path


def report_step(work_dir, attempt: int, step: int, loss: float, seconds: float) -> None:
    """In the chief: append one step's loss and time to the file the launcher watches."""
    record = {"attempt": attempt, "step": step, "loss": loss, "seconds": seconds}
    with (Path(work_dir) / PROGRESS_FILE).open("a") as f:
        f.write(json.dumps(record) + "\n")


def run_cluster(
    job: Job,
    work_dir,
    script=None,
    max_restarts: int = 2,
    timeout_s: float = 600.0,
    progress=None,
) -> ClusterResult:
    """Run the worker ``script`` (default: ``work_dir/worker.py``, as notebook 07 writes it)
    on ``job.workers`` local processes, restarting the whole cluster (up to ``max_restarts``
    times) when a worker dies; the script resumes from the newest checkpoint. Called again on
    the same ``work_dir`` (after a disconnect, say), it resumes there too.

    ``work_dir`` must hold the data (:func:`write_data`); checkpoints and logs go there too.
    Each worker runs ``python script JOB_FILE`` with its ``TF_CONFIG``.
    ``progress(attempt, step, loss)`` is called as the chief reports steps.
    """
    work = Path(work_dir).resolve()
    script = Path(script or work / WORKER_FILE).resolve()
    if not (work / DATA_FILE).exists():
        raise FileNotFoundError(f"{work / DATA_FILE} is missing: call write_data() first")
    if not script.exists():
        raise FileNotFoundError(f"{script} is missing: run the notebook's %%writefile cells")
    if not _latest_step(work / "checkpoints"):  # a fresh run; otherwise it resumes
        (work / PROGRESS_FILE).unlink(missing_ok=True)
    from helpers.environment import nvidia_smi

    visible, device = worker_devices(job.workers, len(nvidia_smi()))
    attempts, logs, start = [], {}, time.perf_counter()
    for number in range(max_restarts + 1):
        spec = {**dataclasses.asdict(job), "attempt": number, "work_dir": str(work)}
        (work / JOB_FILE).write_text(json.dumps(spec))
        resumed_from = _latest_step(work / "checkpoints")
        began = time.perf_counter()
        codes, attempt_logs = _launch(work, script, visible, number, timeout_s, progress)
        logs.update(attempt_logs)
        attempts.append(Attempt(number, resumed_from, codes, time.perf_counter() - began))
        if attempts[-1].ok:
            break
    seconds = time.perf_counter() - start
    if not attempts[-1].ok:
        last = logs[max(logs)]
        raise RuntimeError(
            f"the cluster failed {len(attempts)} times; exit codes {attempts[-1].exit_codes}; "
            f"last log lines:\n{last[-2000:]}"
        )
    losses, step_seconds = _read_progress(work / PROGRESS_FILE, attempts[-1].number)
    return ClusterResult(
        job.workers, job.global_batch, attempts, losses, step_seconds, seconds, logs, device
    )


def _latest_step(directory: Path) -> int:
    steps = [
        int(m.group(1))
        for p in directory.glob("ckpt-*.index")
        if (m := re.match(r"ckpt-(\d+)\.index$", p.name))
    ]
    return max(steps, default=0)


def _worker_command(script: Path, job_path: Path, index: int) -> list[str]:
    """The command line of worker ``index`` (which learns its index from ``TF_CONFIG``)."""
    return [sys.executable, str(script), str(job_path)]


#: the workers of this process that may still run; ended at exit whatever happens
_LIVE: set = set()


def _launch(work: Path, script: Path, visible: list[str], attempt: int, timeout_s: float, progress):
    """Start every worker; stop them all as soon as one fails, and on any exit from here
    (an exception, ``KeyboardInterrupt``). Returns exit codes and logs."""
    from helpers.lessons.scale_out_profile import tf_config  # the notebook's own

    addresses = [f"localhost:{port}" for port in free_ports(len(visible))]
    processes, paths = [], []
    try:
        for index, devices in enumerate(visible):
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config(addresses, index))}
            env["CUDA_VISIBLE_DEVICES"] = devices
            env[LAUNCHER_ENV] = str(os.getpid())
            # the workers import helpers from wherever this process did
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
            path = work / f"worker{index}_attempt{attempt}.log"
            paths.append(path)
            with path.open("w") as log:
                process = subprocess.Popen(
                    _worker_command(script, work / JOB_FILE, index),
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # a group of its own: stopping it stops whatever it started, and the
                    # notebook's interrupt (SIGINT to the kernel's group) stays with the kernel
                    start_new_session=os.name == "posix",
                )
            _LIVE.add(process)
            processes.append(process)
        deadline, seen = time.monotonic() + timeout_s, 0
        while True:
            codes = [p.poll() for p in processes]
            seen = _report(work / PROGRESS_FILE, seen, progress)
            if all(code == 0 for code in codes):
                break
            if any(code not in (None, 0) for code in codes) or time.monotonic() > deadline:
                _stop(processes)  # the others would wait for the dead one in their next all-reduce
                break
            time.sleep(0.2)
        _report(work / PROGRESS_FILE, seen, progress)
        codes = [p.wait() for p in processes]
    finally:
        _stop(processes)  # nothing left running, whatever ended this function
        for p in processes:
            p.wait()
            _LIVE.discard(p)
    return codes, {p.stem: p.read_text() for p in paths}


def _stop(processes) -> None:
    """Kill each running worker and its process group at once.

    SIGKILL, not SIGTERM: the strategy takes SIGTERM as a preemption notice and waits."""
    for p in processes:
        if p.poll() is not None:
            continue
        try:
            if os.name == "posix":
                os.killpg(p.pid, signal.SIGKILL)  # its group: the worker and what it started
            else:
                p.kill()
        except (ProcessLookupError, PermissionError):
            p.kill()


@atexit.register
def _stop_all() -> None:
    """At interpreter exit (a kernel shutting down): no worker is left behind."""
    live = list(_LIVE)
    _stop(live)
    for p in live:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def follow_launcher(interval_s: float = 1.0) -> threading.Thread | None:
    """In a worker: end this process (SIGKILL) as soon as the process that launched it is
    gone, for a launcher killed outright (which runs no cleanup). Returns the watching thread,
    or None when this process was not started by :func:`run_cluster`."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher:
        return None
    launcher_pid = int(launcher)

    def gone() -> bool:
        if os.getppid() != launcher_pid:  # re-parented: the launcher died
            return True
        try:
            os.kill(launcher_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False

    def watch() -> None:
        while not gone():
            time.sleep(interval_s)
        if os.name == "posix" and os.getpgid(0) == os.getpid():  # its own group: all of it
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="follow-launcher", daemon=True)
    thread.start()
    return thread


def _read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _report(path: Path, seen: int, progress) -> int:
    records = _read_lines(path)
    if progress is not None:
        for record in records[seen:]:
            progress(record["attempt"], record["step"], record["loss"])
    return len(records)


def _read_progress(path: Path, last_attempt: int):
    losses, step_seconds, earlier = {}, [], []
    for record in _read_lines(path):
        losses[record["step"]] = record["loss"]
        mine = record["attempt"] == last_attempt
        (step_seconds if mine else earlier).append(record["seconds"])
    # the last attempt's steps after its first (which traces); a resumed run that had nothing
    # left to do reports the earlier steps' times
    return dict(sorted(losses.items())), step_seconds[1:] or step_seconds or earlier[1:]


def plot_recovery(recovered: ClusterResult, reference: ClusterResult, kill_step: int):
    """The loss of a run that lost a worker, over the uninterrupted run's, with the kill and
    the checkpoint it resumed from marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(list(reference.losses), list(reference.losses.values()), label="uninterrupted")
    ax.plot(list(recovered.losses), list(recovered.losses.values()), "--", label="with a restart")
    ax.axvline(kill_step, color="red", linestyle=":", label=f"worker killed (step {kill_step})")
    resumed = recovered.attempts[-1].resumed_from
    ax.axvline(resumed, color="gray", linestyle=":", label=f"resumed from step {resumed}")
    ax.set(
        xlabel="step",
        ylabel="training loss",
        title="A lost worker costs the steps since the checkpoint",
    )
    ax.legend()
    fig.tight_layout()
    return fig
