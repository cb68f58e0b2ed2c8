"""Plumbing of notebook 07 (scale out and profile): the replica devices, the workers' launcher
and the trace reader.

- Replicas (the sweep itself is 07's cell): several GPUs, one GPU split into logical GPUs, or
  the CPU split into logical devices, which show the cost of replication, not a speedup.
- Workers: :func:`run_cluster` runs 07's ``worker.py`` (its ``%%writefile`` cells, which
  ``tools.course.worker_script`` reads back for the tests and ``make bench``) once per worker,
  each with its ``TF_CONFIG``, forked by a :class:`~helpers.processes.Host` in a network
  namespace whose only interface is loopback (TensorFlow's servers listen on every interface),
  or not at all where others could reach them (:func:`exposure`). A dead worker stops the
  cluster, which starts again from the chief's newest checkpoint; no worker outlives its
  launcher (stopped on any exit, at the kernel's exit, and by :func:`follow_launcher`).
- Traces: :func:`read_trace` reads the profiler's ``.xplane.pb`` with the proto TensorFlow
  ships (top operations, input share, device idle time), where TensorBoard's profile plugin is
  not installed (it is not, with TF 2.21).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import ipaddress
import json
import os
import re
import signal
import socket
import struct
import time
from pathlib import Path

import numpy as np

from helpers import devices, processes
from helpers import params as rules
from helpers.data_parallel import batch_rule
from helpers.devices import split_cpu
from helpers.errors import ChildTimeout, LateConfigurationError, WorkersRefused, too_late
from helpers.models import replica_classifier
from helpers.timing import steady_state


@dataclasses.dataclass
class ReplicaDevices:
    kind: str  # "gpu" or "cpu"
    names: list[str]
    description: str
    shared_hardware: bool  # True where the devices are slices of one chip


def replica_counts(largest: int) -> list[int]:
    """1, 2, 4, ... up to ``largest`` (which is included)."""
    counts, n = [], 1
    while n < largest:
        counts.append(n)
        n *= 2
    return counts + [largest]


def replica_devices(count: int, gpu_memory_mb: int | None = None) -> ReplicaDevices:
    """Devices for up to ``count`` replicas; must run before TensorFlow's first op.

    Several GPUs: all of them. One GPU: split into ``count`` logical GPUs of
    ``gpu_memory_mb`` each (default: 80% of the GPU's memory shared out, at most 2 GiB each).
    No GPU: the CPU split into ``count`` logical devices."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) == 1 and gpu_memory_mb is None:
        total = devices.list_gpus()[0].memory_mib or 8192  # nvidia-smi's figure, where it answers
        gpu_memory_mb = min(2048, int(0.8 * total / count))
    if len(gpus) > 1:
        for gpu in gpus:  # take only what training needs: local workers want GPUs later
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:  # TensorFlow already started its GPUs: keep what is set
                pass
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        return ReplicaDevices("gpu", names, f"{len(names)} GPUs", False)
    if gpus:
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb)] * count
        try:
            tf.config.set_logical_device_configuration(gpus[0], config)
        except RuntimeError:
            have = len(tf.config.list_logical_devices("GPU"))
            if have != count:
                raise LateConfigurationError(
                    too_late(f"{count} logical GPUs", f"TensorFlow already started with {have}")
                ) from None
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        return ReplicaDevices(
            "gpu", names, f"GPU split into {count} logical GPUs of {gpu_memory_mb} MB", True
        )
    split_cpu(count)
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    return ReplicaDevices("cpu", names, f"CPU split into {count} logical devices", True)


def plot(rows: list[dict], description: str):
    """Images/s against replicas, beside perfect linear scaling from the first point."""
    import matplotlib.pyplot as plt

    counts = [r["replicas"] for r in rows]
    measured = [r["images_per_s"] for r in rows]
    ideal = [measured[0] * c / counts[0] for c in counts]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(counts, measured, "o-", label="measured")
    ax.plot(counts, ideal, "--", color="gray", label="perfect scaling")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_xlabel("replicas")
    ax.set_ylabel("training images/s")
    ax.set_title(f"MirroredStrategy on {description}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


DATA_FILE = "data.npz"
JOB_FILE = "job.json"
PROGRESS_FILE = "progress.jsonl"
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
LAUNCHER_ENV = processes.LAUNCHER_ENV  # a worker ends itself when this process is gone
follow_launcher = processes.follow_launcher  # in worker.py: end this worker with the notebook
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
        return self.global_batch / steady_state(self.step_seconds, warmup=0)

    @property
    def final_loss(self) -> float:
        return self.losses[max(self.losses)]


def outside_addresses() -> list[str]:
    """This machine's addresses that are not loopback: where others may reach its ports (IPv4
    from each interface, IPv6 from /proc/net/if_inet6; an interface whose address cannot be
    read counts by its name)."""
    import fcntl  # POSIX only, as in helpers.workdirs

    found = set()
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's IPv4 address
                request = struct.pack("256s", name[:15].encode())
                packed = fcntl.ioctl(probe.fileno(), 0x8915, request)
                found.add(socket.inet_ntoa(packed[20:24]))
            except OSError:  # no IPv4 address (or not Linux)
                if name != "lo" and not Path("/proc/net/if_inet6").exists():
                    found.add(name)
    finally:
        probe.close()
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        lines = []
    found.update(str(ipaddress.ip_address(bytes.fromhex(line.split()[0]))) for line in lines)
    return sorted(a for a in found if not _is_loopback(a))


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # an interface's name: not loopback unless it is lo
        return address == "lo"


#: Why local workers must be kept from other machines (notebook 07 says it in prose too)
LISTENS_EVERYWHERE = (
    "TensorFlow's workers listen on every interface whatever host TF_CONFIG names, and take "
    "operations that read and write files from whoever reaches their ports"
)
#: this kernel's host of workers (helpers.processes.Host), made at the first cluster
_HOST: processes.Host | None = None


def _workers_host() -> processes.Host:
    """The host this kernel's workers are forked from: made once, again only if it died."""
    global _HOST
    if _HOST is None or (_HOST.isolated and not _HOST.alive()):
        _HOST = processes.Host()
    return _HOST


def exposure(open_ports: bool, host=None, outside=None) -> str:
    """Where the workers run and who can reach their ports, as a sentence; raises
    :class:`~helpers.errors.WorkersRefused` where others could and ``open_ports`` is not True.
    Decided by facts: the workers' host entered a network namespace whose only interface is
    loopback, or this machine has no other address; never by what platform this says it is."""
    host = host or _workers_host()
    if host.isolated:
        return ("The workers run in a network namespace of their own, whose only interface is "
                "loopback: no other machine can reach their ports.")
    outside = outside_addresses() if outside is None else outside
    if not outside:
        return (f"Here {host.refused}, but it has loopback interfaces only: no other machine "
                "can reach the workers' ports.")
    shown = ", ".join(outside[:3]) + (", ..." if len(outside) > 3 else "")
    if open_ports:
        return (f"{LISTENS_EVERYWHERE}; here {host.refused}, so others may reach them at "
                f"{shown}: open_ports=True accepts that; keep them out with a firewall.")
    raise WorkersRefused(
        f"The workers were not started: {LISTENS_EVERYWHERE}; here {host.refused}, and this "
        f"machine can be reached at {shown}. Set open_ports=True once a firewall keeps others out."
    )


def workers_may_start(open_ports: bool) -> bool:
    """Print :func:`exposure`'s sentence, or its refusal as one line; whether workers may start."""
    try:
        print(exposure(open_ports))
    except WorkersRefused as refusal:
        print(refusal)
        return False
    return True


free_ports = processes.free_ports  # in this kernel's network, for a TF_CONFIG shown


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
    *,
    tf_config,
    max_restarts: int = 2,
    timeout_s: float = 600.0,
    progress=None,
    open_ports: bool = False,
) -> ClusterResult:
    """Run the worker ``script`` (default: ``work_dir/worker.py``, as notebook 07 writes it)
    on ``job.workers`` local processes, worker ``i`` with ``TF_CONFIG`` =
    ``tf_config(addresses, i)`` (the notebook's own function), restarting the whole cluster
    (up to ``max_restarts`` times) when a worker dies; the script resumes from the newest
    checkpoint. Called again on
    the same ``work_dir`` (after a disconnect, say), it resumes there too.

    ``work_dir`` must hold the data (:func:`write_data`); checkpoints and logs go there too.
    Each worker runs ``script JOB_FILE`` as ``python script JOB_FILE`` would, with its
    ``TF_CONFIG``, in a process of its own (:func:`helpers.processes.start_script`).
    ``progress(attempt, step, loss)`` is called as the chief reports steps. The workers are
    forked by this kernel's :class:`~helpers.processes.Host`, in a network namespace whose only
    interface is loopback; where the machine refuses one and others can reach it, nothing starts
    unless ``open_ports`` is True (:func:`exposure`). An attempt that runs past ``timeout_s``
    stops the cluster for good, with :class:`~helpers.errors.ChildTimeout`.
    """
    exposure(open_ports)  # before anything starts: one line naming open_ports
    host = _workers_host()
    start, ports = (host.start_script, host.free_ports) if host.isolated else (
        processes.start_script, processes.free_ports)
    work = Path(work_dir).resolve()
    script = Path(script or work / WORKER_FILE).resolve()
    if not (work / DATA_FILE).exists():
        raise FileNotFoundError(f"{work / DATA_FILE} is missing: call write_data() first")
    if not script.exists():
        raise FileNotFoundError(f"{script} is missing: run the notebook's %%writefile cells")
    if not _latest_step(work / "checkpoints"):  # a fresh run; otherwise it resumes
        (work / PROGRESS_FILE).unlink(missing_ok=True)

    visible, device = worker_devices(job.workers, len(devices.nvidia_smi()))
    attempts, logs, began_all = [], {}, time.perf_counter()
    for number in range(max_restarts + 1):
        spec = {**dataclasses.asdict(job), "attempt": number, "work_dir": str(work)}
        (work / JOB_FILE).write_text(json.dumps(spec))
        resumed_from = _latest_step(work / "checkpoints")
        began = time.perf_counter()
        addresses = [f"localhost:{port}" for port in ports(len(visible))]
        codes, attempt_logs, timed_out = _launch(
            work, script, visible, number, timeout_s, progress, tf_config, addresses, start)
        logs.update(attempt_logs)
        attempts.append(Attempt(number, resumed_from, codes, time.perf_counter() - began))
        if timed_out:
            raise ChildTimeout(
                f"the cluster timed out after {timeout_s:.0f} s (attempt {number + 1} of "
                f"{max_restarts + 1}), so it was stopped and not started again; its logs are "
                f"in {work}")
        if attempts[-1].ok:
            break
    seconds = time.perf_counter() - began_all
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


#: the workers of this process that may still run; ended at exit whatever happens
_LIVE: set = set()


def _launch(work: Path, script: Path, visible: list[str], attempt: int, timeout_s: float, progress,
            tf_config, addresses: list[str], start):
    """Start every worker (``start``: a host's or the fork server's ``start_script``); stop them
    all as soon as one fails or the time is up, and on any exit from here (an exception,
    ``KeyboardInterrupt``). Returns exit codes, logs, and whether the time ran out."""
    workers, paths, timed_out = [], [], False
    try:
        for index, cuda_devices in enumerate(visible):
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config(addresses, index))}
            env["CUDA_VISIBLE_DEVICES"] = cuda_devices
            env[LAUNCHER_ENV] = str(os.getpid())
            # the workers import helpers from wherever this process did
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, env.get("PYTHONPATH")]))
            path = work / f"worker{index}_attempt{attempt}.log"
            paths.append(path)
            # `python script job.json`, forked from a process that has imported TensorFlow
            # once for every worker (helpers.processes), in a process group of its own: stopping
            # it stops whatever it started, and the notebook's interrupt stays with the kernel
            process = start(script, [str(work / JOB_FILE)], env, path)
            _LIVE.add(process)
            workers.append(process)
        deadline, seen = time.monotonic() + timeout_s, 0
        while True:
            codes = [p.exitcode for p in workers]
            seen = _report(work / PROGRESS_FILE, seen, progress)
            if all(code == 0 for code in codes):
                break
            timed_out = time.monotonic() > deadline
            if any(code not in (None, 0) for code in codes) or timed_out:
                _stop(workers)  # the others would wait for the dead one in their next all-reduce
                break
            time.sleep(0.2)
        _report(work / PROGRESS_FILE, seen, progress)
        for p in workers:
            p.join()
        codes = [p.exitcode for p in workers]
    finally:
        _stop(workers)  # nothing left running, whatever ended this function
        for p in workers:
            p.join()
            _LIVE.discard(p)
    return codes, {p.stem: p.read_text() for p in paths}, timed_out


def _stop(workers) -> None:
    """Kill each running worker and its process group at once.

    SIGKILL, not SIGTERM: the strategy takes SIGTERM as a preemption notice and waits."""
    for p in workers:
        if p.exitcode is not None:
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
        p.join(timeout=10)


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


#: the name of the step markers notebook 07's ``capture`` writes into the trace
STEP_NAME = "train"
#: a TensorFlow op event: "scope/op_name:OpType"
OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
#: events where a step waits for its next input batch
INPUT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
#: prefixes oneDNN puts in front of op types on a CPU
_CPU_PREFIXES = re.compile(r"^_(MklNative|MklFused|Mkl|Fused)")


@dataclasses.dataclass
class OpTime:
    type: str
    name: str
    ms: float  # total over the traced steps (summed over threads on a CPU)
    count: int


@dataclasses.dataclass
class TraceSummary:
    """What a trace says about the traced steps."""

    device: str  # the plane the ops were read from: "/host:CPU" or "/device:GPU:0"...
    step_ms: list[float]
    ops: list[OpTime]  # by total time, largest first
    input_share: float  # of step time, waiting for the input pipeline
    idle_share: float  # of step time, with no op running on the device
    path: Path

    @property
    def median_step_ms(self) -> float:
        return steady_state(self.step_ms, warmup=0)

    def by_type(self) -> list[tuple[str, float, float]]:
        """(op type, ms, share of all op time), largest first."""
        totals = collections.Counter()
        for op in self.ops:
            totals[op.type] += op.ms
        whole = sum(totals.values()) or 1.0
        return [(kind, ms, ms / whole) for kind, ms in totals.most_common()]


def trace_file(logdir, since: float) -> Path:
    """The ``.xplane.pb`` a capture into ``logdir`` that began at ``since`` (``time.time()``)
    wrote. Runs are folders named by the second they started in: a second capture in the same
    second rewrites the same file, so this looks at when files were written, not at new names."""
    files = Path(logdir).glob("plugins/profile/*/*.xplane.pb")
    new = [p for p in files if p.stat().st_mtime >= since]
    if not new:
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    return max(new, key=lambda p: p.stat().st_mtime)


def read_trace(path) -> TraceSummary:
    """Summarise the steps ``capture`` (notebook 07) marked in the trace at ``path``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    steps = sorted(_events(host, lambda name: name == STEP_NAME))
    if not steps:
        raise ValueError(f"no '{STEP_NAME}' step markers in {path}: was it written by capture()?")
    accelerators = [
        plane
        for plane in space.planes
        if plane.name.startswith("/device:") and any(line.events for line in plane.lines)
    ]
    if accelerators:
        plane = accelerators[0]
        ops = list(_device_ops(plane))
    else:  # the CPU: op events on TensorFlow's threads, not on the input pipeline's
        plane = host
        ops = [
            (start, end, match["type"], match["name"])
            for start, end, name in _events(host, _is_op, True, skip_lines="tf_data")
            if (match := OP_EVENT.match(name))
        ]
    ops = [op for op in ops if _within(op[0], op[1], steps)]
    waits = [(s, e) for s, e in _events(host, lambda n: n in INPUT_EVENTS)]
    step_ps = sum(end - start for start, end in steps)
    busy = _overlap(_union((s, e) for s, e, *_ in ops), steps)
    waiting = _overlap(_union(waits), steps)
    return TraceSummary(
        device=plane.name,
        step_ms=[(end - start) / 1e9 for start, end in steps],
        ops=_aggregate(ops),
        input_share=waiting / step_ps,
        idle_share=max(0.0, 1 - busy / step_ps),
        path=Path(path),
    )


def _is_op(name: str) -> bool:
    match = OP_EVENT.match(name)
    return match is not None and not match["type"].startswith("IteratorGetNext")


def _events(plane, wanted, with_name: bool = False, skip_lines: str | None = None):
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines:
        if skip_lines and line.name.startswith(skip_lines):
            continue
        base = line.timestamp_ns * 1000
        for event in line.events:
            name = names.get(event.metadata_id, "")
            if wanted(name):
                start = base + event.offset_ps
                yield (
                    (start, start + event.duration_ps, name)
                    if with_name
                    else (
                        start,
                        start + event.duration_ps,
                    )
                )


def _device_ops(plane):
    """GPU/TPU kernels, named by the TensorFlow op that launched them where the trace says."""
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    # GPU kernels are on "Stream #N" lines, TPU ops on "XLA Ops"; other lines (modules, name
    # scopes) cover the same time again
    for wanted in ("Stream", "XLA Ops", ""):
        lines = [line for line in plane.lines if line.name.startswith(wanted) and line.events]
        if lines:
            break
    for line in lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            op = names.get(event.metadata_id, "")
            for stat in list(event.stats) + list(plane.event_metadata[event.metadata_id].stats):
                if stat_names.get(stat.metadata_id) == "tf_op":
                    op = stat.str_value or stat_names.get(stat.ref_value, op)
                    break
            match = OP_EVENT.match(op)
            if match and match["type"].startswith("IteratorGetNext"):
                continue
            kind, name = (match["type"], match["name"]) if match else (op, op)
            start = base + event.offset_ps
            yield start, start + event.duration_ps, kind, name


def _within(start: int, end: int, steps) -> bool:
    return any(start < step_end and end > step_start for step_start, step_end in steps)


def _union(intervals) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _overlap(intervals, steps) -> int:
    return sum(
        max(0, min(end, step_end) - max(start, step_start))
        for start, end in intervals
        for step_start, step_end in steps
    )


def _aggregate(ops) -> list[OpTime]:
    totals: dict[tuple[str, str], list] = {}
    for start, end, kind, name in ops:
        entry = totals.setdefault((_CPU_PREFIXES.sub("", kind), name), [0, 0])
        entry[0] += end - start
        entry[1] += 1
    rows = [OpTime(kind, name, ps / 1e9, count) for (kind, name), (ps, count) in totals.items()]
    return sorted(rows, key=lambda row: row.ms, reverse=True)


def classifier_step(x, y, batch: int, decode_ms: float = 0.0, tuned: bool = False):
    """The classifier's training step on one device, fed through a ``map`` that waits
    ``decode_ms`` per batch (a stand-in for decoding images). Untuned: the map runs one batch
    at a time, in line with training. Tuned: a parallel map and prefetch, so the waits overlap
    the steps; eight calls at once, since a decode that waits (here, or on storage) does not
    use a core. Returns a ``step()`` for notebook 07's ``capture``."""
    import keras
    import tensorflow as tf

    def decode(images, labels):
        def wait(batch_images):
            time.sleep(decode_ms / 1000)
            return batch_images

        out = tf.py_function(wait, [images], images.dtype)
        out.set_shape(images.shape)
        return out, labels

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).repeat()
    if tuned:
        ds = ds.map(decode, num_parallel_calls=8).prefetch(8)
    else:
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False
        ds = ds.map(decode).with_options(options)
    iterator = iter(ds)
    model = replica_classifier(x.shape[1:], synchronized=False)
    optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        images, labels = next(iterator)
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    return step


def check_parameters(*, replicas, per_replica_batch, scaling_epochs, max_images, workers,
                     global_batch_size, worker_steps, checkpoint_every, kill_at_step,
                     profile_steps, decode_ms, work_dir, open_ports):
    """Notebook 07's parameters, checked before any work: one line names a wrong one."""
    return rules.validate(
        replicas=(replicas, rules.integer(1, 64)),
        per_replica_batch=(per_replica_batch, rules.integer(1, 4096)),
        scaling_epochs=(scaling_epochs, rules.integer(2, 100)),
        max_images=(max_images, rules.all_of(rules.integer(256, 10_000_000),
                                             rules.fits_in_memory(8 * 28 * 28))),
        workers=(workers, rules.integer(1, 8)),
        global_batch_size=(global_batch_size, batch_rule(workers)),
        worker_steps=(worker_steps, rules.integer(2, 1_000_000)),
        checkpoint_every=(checkpoint_every, rules.integer(1, 1_000_000)),
        kill_at_step=(kill_at_step, rules.check(
            lambda v: v == 0 or (isinstance(v, int) and checkpoint_every < v < worker_steps),
            f"expected 0 or a step after checkpoint_every={checkpoint_every} and before "
            f"worker_steps={worker_steps}")),
        profile_steps=(profile_steps, rules.integer(1, 1000)),
        decode_ms=(decode_ms, rules.number(0, 1000)),
        work_dir=(work_dir, rules.folder()),
        open_ports=(open_ports, rules.boolean()),
    )
