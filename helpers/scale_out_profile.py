"""Plumbing of notebook 08: replica devices, isolated local clusters, traces read without TB."""

import atexit
import collections
import contextlib
import dataclasses
import json
import os
import re
import signal
import time
from pathlib import Path

import numpy as np

from helpers import devices, processes
from helpers import params as rules
from helpers.data_parallel import batch_rule
from helpers.display import subplots
from helpers.errors import ChildTimeout, WorkersRefused
from helpers.gpu_vs_cpu_benchmark import MIN_ROUNDS, called, median_range
from helpers.processes import listening
from helpers.timing import steady_state

#: kind: "gpu" or "cpu"; shared_hardware: True where the devices are slices of one chip
ReplicaDevices = collections.namedtuple("ReplicaDevices", "kind names description shared_hardware")


def replica_counts(largest: int) -> list[int]:
    """1, 2, 4, ... up to ``largest`` (which is included)."""
    return [2**i for i in range((largest - 1).bit_length())] + [largest]


def replica_devices(count: int) -> ReplicaDevices:
    """Devices for ``count`` replicas: several GPUs, else one GPU split (<= 2 GiB each), or CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        names = devices.split_devices(count)
        return ReplicaDevices("cpu", names, f"CPU split into {count} logical devices", True)
    if len(gpus) > 1:
        for gpu in gpus:  # take only what training needs: local workers want GPUs later
            with contextlib.suppress(RuntimeError):  # already started: keep what is set
                tf.config.experimental.set_memory_growth(gpu, True)
        names = [d.name for d in tf.config.list_logical_devices("GPU")]
        return ReplicaDevices("gpu", names, f"{len(names)} GPUs", False)
    total = devices.list_gpus()[0].memory_mib or 8192  # nvidia-smi's figure, where it answers
    size_mb = min(2048, int(0.8 * total / count))
    names = devices.split_devices(count, "GPU", size_mb)
    split = f"GPU split into {count} logical GPUs of {size_mb} MB"
    return ReplicaDevices("gpu", names, split, True)


def read_split(by_batch, by_replicas, shared: bool) -> str:
    """The batch's and the replicas' factors, one a round, read by the course's rule."""
    def change(ratios) -> str:
        verdict = called(ratios, more=f"pass split_rounds >= {MIN_ROUNDS}")
        return f"{median_range(ratios, 2, 1, 'x')}, {verdict}"
    return f"The larger batch: {change(by_batch)}; the replicas: {change(by_replicas)}." + (
        " These replicas are slices of one chip: they add no compute; any gain is only idle time "
        "overlapped, not what more chips buy." if shared else "")


def plot(rows: list[dict], points: dict, description: str):
    """Images/s against replicas beside perfect scaling; ``points``: {label: (replicas, rates)}."""
    counts, measured = [r["replicas"] for r in rows], [r["images_per_s"] for r in rows]
    fig, ax = subplots(figsize=(6, 3.5), layout="tight")
    ax.plot(counts, measured, "o-", label="batch per replica fixed")
    ax.plot(counts, [measured[0] * c for c in counts], "--", color="gray", label="perfect scaling")
    for (label, (count, rates)), marker in zip(points.items(), "xs+", strict=False):
        ax.plot([count] * len(rates), rates, marker, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set(xlabel="replicas", ylabel="training images/s", title=f"MirroredStrategy, {description}")
    ax.legend(fontsize=8)
    return fig


DATA_FILE = "data.npz"
JOB_FILE = "job.json"
PROGRESS_FILE = "progress.jsonl"
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
WORKER_FILE = "worker.py"


@dataclasses.dataclass
class Job:  # what every worker trains, and how
    workers: int = 2
    global_batch: int = 64
    steps: int = 60
    checkpoint_every: int = 20
    learning_rate: float = 0.005  # SGD; larger rates made the first steps unstable here
    seed: int = 0
    kill: tuple[int, int] | None = None  # (worker, step): SIGKILLed there in attempt 0 only
    dtype: str = "float32"  # float64: the yardstick's reference run
    collective_timeout_s: float = 120.0  # how long a worker waits for the others in a collective


#: One start of the cluster; resumed_from: the checkpoint step it started from (0: from scratch)
Attempt = collections.namedtuple("Attempt", "number resumed_from exit_codes seconds")


@dataclasses.dataclass
class ClusterResult:  # what the cluster did: the attempts, the loss per step, and timing
    global_batch: int
    attempts: list[Attempt]
    losses: dict[int, float]  # step -> loss (the last attempt's value where steps repeat)
    step_seconds: list[float]  # per step of the last attempt, after its first
    seconds: float  # the attempts' wall clock, each from its workers' fork (TensorFlow imported)
    device: str = ""  # what the workers ran on
    weights: list = dataclasses.field(default_factory=list)  # the model's, at the last step

    @property
    def images_per_s(self) -> float:  # steady state: the global batch over the median step time
        return self.global_batch / steady_state(self.step_seconds, warmup=0)

    @property
    def final_loss(self) -> float:
        return self.losses[max(self.losses)]


#: Why local workers must be kept from other machines (notebook 08 says it in prose too)
LISTENS_EVERYWHERE = ("TensorFlow's workers listen on every interface whatever host TF_CONFIG "
                      "names, and take operations that read and write files from whoever "
                      "reaches their ports")
_HOST: processes.Host | None = None  # this kernel's host of workers, made at the first cluster


def _workers_host() -> processes.Host:
    """This kernel's workers' host (own network, else the loopback shim); remade if it died."""
    global _HOST
    if _HOST is None or (_HOST.refused is None and not _HOST.alive()):
        _HOST = processes.Host()
        if why := _HOST.refused:  # no namespace: the shim, every wildcard bind made loopback
            try:
                _HOST = processes.Host(processes.loopback_shim())
            except OSError as error:  # no C compiler, or it failed
                _HOST.refused = str(error)
            _HOST.refused = _HOST.refused and f"{why}, and {_HOST.refused}"
    return _HOST


def exposure(open_ports: bool) -> str:
    """Who can reach the workers' ports; :class:`WorkersRefused` where others could."""
    host = _workers_host()
    if host.isolated:
        return ("The workers run in a network namespace of their own, whose only interface is "
                "loopback: no other machine can reach their ports.")
    if host.refused is None:  # the shim: what they listen on is read back while they run
        return ("This machine refuses the workers a network namespace, so a shim (LD_PRELOAD) "
                "binds them to loopback where they ask for every interface; what they listen on "
                "is read back from /proc once they start:")
    if open_ports:
        return (f"{LISTENS_EVERYWHERE}; here {host.refused}, so other machines may reach them: "
                "open_ports=True accepts that; keep them out with a firewall.")
    raise WorkersRefused(f"The workers were not started: {LISTENS_EVERYWHERE}; here "
                         f"{host.refused}. Set open_ports=True once a firewall keeps others out.")


def workers_may_start(open_ports: bool) -> bool:
    """Print :func:`exposure`'s sentence, or its refusal as one line; whether workers may start."""
    _READ_BACK.clear()  # what the next workers listen on is said again: once a notebook run
    try:
        print(exposure(open_ports))
    except WorkersRefused as refusal:
        print(refusal)
        return False
    return True


def worker_devices(workers: int, gpus: int, largest: int = 0) -> tuple[list[str], str]:
    """Each worker's ``CUDA_VISIBLE_DEVICES``: a GPU each where the ``largest`` cluster has too."""
    if gpus >= max(workers, largest, 2):
        return [str(i) for i in range(workers)], "one GPU each"
    return ["-1"] * workers, "the CPU"


def write_data(work_dir, x, y) -> Path:
    """Save the training arrays once where every worker reads them (on machines: a shared disk)."""
    path = Path(work_dir) / DATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, x=x, y=y)
    return path


def report_step(work_dir, attempt: int, step: int, loss: float, seconds: float) -> None:
    """In the chief: append one step's loss and time to the file the launcher watches."""
    with (Path(work_dir) / PROGRESS_FILE).open("a") as f:
        print(json.dumps(dict(attempt=attempt, step=step, loss=loss, seconds=seconds)), file=f)


def run_cluster(job: Job, work_dir, script=None, *, tf_config, max_restarts: int = 2,
                timeout_s: float = 600.0, progress=None, open_ports: bool = False,
                largest: int = 0) -> ClusterResult:
    """``python script JOB_FILE`` in ``job.workers`` processes with ``tf_config(addresses, i)``,
    forked by this kernel's Host (:func:`exposure`); a dead worker restarts them all."""
    exposure(open_ports)  # before anything starts: one line naming open_ports
    host = _workers_host()
    forker = host if host.refused is None else processes  # both have start_script
    guard = forker is host and not open_ports  # what they listen on, read back as they run
    work = Path(work_dir).resolve()
    script = Path(script or work / WORKER_FILE).resolve()
    if not (work / DATA_FILE).exists():
        raise FileNotFoundError(f"{work / DATA_FILE} is missing: call write_data() first")
    if not script.exists():
        raise FileNotFoundError(f"{script} is missing: run the notebook's %%writefile cells")
    if not _latest_step(work / "checkpoints"):  # a fresh run; otherwise it resumes
        (work / PROGRESS_FILE).unlink(missing_ok=True)

    visible, device = worker_devices(job.workers, len(devices.nvidia_smi()), largest)
    attempts = []
    for number in range(max_restarts + 1):
        spec = {**dataclasses.asdict(job), "attempt": number, "work_dir": str(work)}
        (work / JOB_FILE).write_text(json.dumps(spec))
        resumed_from = _latest_step(work / "checkpoints")
        addresses = [f"127.0.0.1:{port}" for port in processes.free_ports(len(visible))]
        codes, timed_out, began = _launch(work, script, visible, number, timeout_s, progress,
                                          tf_config, addresses, forker.start_script, guard)
        attempts.append(Attempt(number, resumed_from, codes, time.perf_counter() - began))
        if timed_out:
            raise ChildTimeout(f"the cluster timed out after {timeout_s:.0f} s (attempt "
                               f"{number + 1} of {max_restarts + 1}), so it was stopped and not "
                               f"started again; its logs are in {work}")
        if not any(codes):
            break
    seconds = sum(attempt.seconds for attempt in attempts)  # the host's own start left out
    if any(codes):
        last = (work / f"worker{len(visible) - 1}_attempt{number}.log").read_text()
        raise RuntimeError(f"the cluster failed {len(attempts)} times; exit codes "
                           f"{attempts[-1].exit_codes}; last log lines:\n{last[-2000:]}")
    losses, step_seconds = _read_progress(work / PROGRESS_FILE, attempts[-1].number)
    return ClusterResult(job.global_batch, attempts, losses, step_seconds, seconds, device,
                         _model_weights(work / "checkpoints"))


def _model_weights(directory: Path) -> list[np.ndarray]:  # worker.py's names: model/v000, ...
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(directory))
    return [reader.get_tensor(name) for name in sorted(reader.get_variable_to_shape_map())
            if name.startswith("model/")]


def _latest_step(directory: Path) -> int:
    return max((int(p.stem[len("ckpt-"):]) for p in directory.glob("ckpt-*.index")), default=0)


_LIVE: set = set()  # the workers of this process that may still run: ended at exit
_READ_BACK: list[str] = []  # what the first workers all listened on, once said


def _launch(work: Path, script: Path, visible: list[str], attempt: int, timeout_s: float, progress,
            tf_config, addresses: list[str], start, guard: bool) -> tuple[list[int], bool, float]:
    """(exit codes, timed out, forked at); all stop on a failure, a timeout, a port off loopback."""
    workers, timed_out, seen = [], False, len(_read_lines(work / PROGRESS_FILE))  # earlier: seen
    try:
        for index, cuda_devices in enumerate(visible):
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config(addresses, index)),
                   "CUDA_VISIBLE_DEVICES": cuda_devices, processes.LAUNCHER_ENV: str(os.getpid()),
                   "NCCL_SOCKET_IFNAME": "lo",  # NCCL's own sockets (GPUs) on loopback too
                   "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT,
                                                               os.environ.get("PYTHONPATH")]))}
            log = work / f"worker{index}_attempt{attempt}.log"
            workers.append(start(script, [str(work / JOB_FILE)], env, log))  # a group of its own
            _LIVE.add(workers[-1])
        began = time.perf_counter()  # every worker forked: the host's start is behind them
        while any(p.exitcode != 0 for p in workers):
            seen = _report(work / PROGRESS_FILE, seen, progress)
            if guard:
                _read_back({p.pid for p in workers}, {int(a.rsplit(":", 1)[1]) for a in addresses})
            timed_out = time.perf_counter() > began + timeout_s
            if timed_out or any(p.exitcode not in (None, 0) for p in workers):
                break  # all stop: the others would wait for the dead one in their next all-reduce
            time.sleep(0.2)
        _report(work / PROGRESS_FILE, seen, progress)
    finally:
        _stop(workers)  # nothing left running, whatever ended this function
        for p in workers:
            p.join()
            _LIVE.discard(p)
    return [p.exitcode for p in workers], timed_out, began


def _read_back(groups: set[int], ports: set[int]) -> None:
    """:class:`WorkersRefused` if they listen beyond loopback; else say where, once all listen."""
    found = listening(groups)
    heard = [f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}" for ip, port in found]
    if not all(ip.is_loopback for ip, _ in found):
        raise WorkersRefused(f"The workers were stopped: they listened on {', '.join(heard)}, "
                             "beyond loopback, where other machines can reach them. Set "
                             "open_ports=True only once a firewall keeps others out.")
    if not _READ_BACK and ports <= {port for _, port in found}:
        _READ_BACK.append(f"The workers listen on {' and '.join(heard)} only (read back from "
                          "/proc): no other machine can reach them.")
        print(_READ_BACK[0], flush=True)


def _stop(workers) -> None:
    """SIGKILL each running worker's process group (SIGTERM reads as a preemption notice)."""
    for p in workers:
        if p.exitcode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # its group: the worker and what it started
            except (ProcessLookupError, PermissionError):  # not yet in a group of its own
                p.kill()


@atexit.register  # at interpreter exit (a kernel shutting down): no worker is left behind
def _stop_all() -> None:
    live = list(_LIVE)
    _stop(live)
    for p in live:
        p.join(timeout=10)


def _read_lines(path: Path) -> list[dict]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _report(path: Path, seen: int, progress) -> int:
    records = _read_lines(path)
    for record in records[seen:] if progress else []:
        progress(record["attempt"], record["step"], record["loss"])
    return len(records)


def _read_progress(path: Path, last_attempt: int):
    losses, step_seconds, earlier = {}, [], []
    for record in _read_lines(path):
        losses[record["step"]] = record["loss"]
        (step_seconds if record["attempt"] == last_attempt else earlier).append(record["seconds"])
    # the last attempt's steps after its first (which traces); else (nothing left) the earlier
    return dict(sorted(losses.items())), step_seconds[1:] or step_seconds or earlier[1:]


def plot_recovery(recovered: ClusterResult, reference: ClusterResult, kill_step: int):
    """The loss of a run that lost a worker over the uninterrupted run's, kill and resume marked."""
    fig, ax = subplots(figsize=(7, 3.5), layout="tight")
    ax.plot(list(reference.losses), list(reference.losses.values()), label="uninterrupted")
    ax.plot(list(recovered.losses), list(recovered.losses.values()), "--", label="with a restart")
    ax.axvline(kill_step, color="red", linestyle=":", label=f"worker killed (step {kill_step})")
    resumed = recovered.attempts[-1].resumed_from
    ax.axvline(resumed, color="gray", linestyle=":", label=f"resumed from step {resumed}")
    ax.set(xlabel="step", ylabel="training loss",
           title="A lost worker costs the steps since the checkpoint")
    ax.legend()
    return fig


STEP_NAME = "train"  # the step markers notebook 08's ``capture`` writes into the trace
OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")  # scope/name:Type
#: events where a step waits for its next input batch
INPUT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
_CPU_PREFIXES = re.compile(r"^_(MklNative|MklFused|Mkl|Fused)")  # oneDNN's, on a CPU

#: ms: the total over the traced steps (summed over threads on a CPU)
OpTime = collections.namedtuple("OpTime", "type name ms count")


@dataclasses.dataclass
class TraceSummary:  # what a trace says about the traced steps
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
    """The newest ``.xplane.pb`` under ``logdir`` since ``since`` (``time.time()``, less 1 s)."""
    files = Path(logdir).glob("plugins/profile/*/*.xplane.pb")
    if not (new := [p for p in files if p.stat().st_mtime >= since - 1]):  # a clock set back
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    return max(new, key=lambda p: p.stat().st_mtime)


def read_trace(path) -> TraceSummary:
    """Summarise the steps ``capture`` (notebook 08) marked in the trace at ``path``."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace.FromString(Path(path).read_bytes())
    host = next(p for p in space.planes if p.name == "/host:CPU")
    steps = sorted((start, end) for start, end, *_ in _events(host, STEP_NAME.__eq__))
    if not steps:
        raise ValueError(f"no '{STEP_NAME}' step markers in {path}: was it written by capture()?")
    accelerators = [plane for plane in space.planes if plane.name.startswith("/device:")
                    and any(line.events for line in plane.lines)]
    if accelerators:
        plane, named = accelerators[0], _device_ops(accelerators[0])
    else:  # the CPU: op events on TensorFlow's threads, not on the input pipeline's
        plane = host
        lines = [line for line in host.lines if not line.name.startswith("tf_data")]
        named = [(start, end, name) for start, end, name, _ in _events(host, OP_EVENT.match, lines)]
    spans, totals = [], {}  # (op type, name) -> [ps, count]
    for start, end, name in named:  # "scope/op_name:OpType", or a kernel's own name
        match = OP_EVENT.match(name)
        kind, name = (match["type"], match["name"]) if match else (name, name)
        if not kind.startswith("IteratorGetNext") and _within(start, end, steps):
            spans.append((start, end))
            total = totals.setdefault((_CPU_PREFIXES.sub("", kind), name), [0, 0])
            total[0] += end - start
            total[1] += 1
    ops = [OpTime(kind, name, ps / 1e9, count) for (kind, name), (ps, count) in totals.items()]
    step_ps = sum(end - start for start, end in steps)
    waits = [(start, end) for start, end, *_ in _events(host, INPUT_EVENTS.__contains__)]
    return TraceSummary(device=plane.name, step_ms=[(end - start) / 1e9 for start, end in steps],
                        ops=sorted(ops, key=lambda op: op.ms, reverse=True),
                        input_share=_overlap(_union(waits), steps) / step_ps,
                        idle_share=max(0.0, 1 - _overlap(_union(spans), steps) / step_ps),
                        path=Path(path))


def _events(plane, wanted, lines=None):
    """``(start, end, name, event)`` in ps of each event on ``lines`` (or all) ``wanted`` takes."""
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines if lines is None else lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            if wanted(name := names.get(event.metadata_id, "")):
                start = base + event.offset_ps
                yield start, start + event.duration_ps, name, event


def _device_ops(plane) -> list[tuple[int, int, str]]:
    """GPU/TPU kernels, named by the TensorFlow op that launched them where the trace says."""
    stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    # GPU kernels are on "Stream #N" lines, TPU ops on "XLA Ops"; others cover the same time again
    for wanted in ("Stream", "XLA Ops", ""):
        lines = [line for line in plane.lines if line.name.startswith(wanted) and line.events]
        if lines:
            break
    ops = []
    for start, end, op, event in _events(plane, lambda _: True, lines):
        for stat in [*event.stats, *plane.event_metadata[event.metadata_id].stats]:
            if stat_names.get(stat.metadata_id) == "tf_op":
                op = stat.str_value or stat_names.get(stat.ref_value, op)
                break
        ops.append((start, end, op))
    return ops


def _within(start: int, end: int, steps) -> bool:
    return any(start < step_end and end > step_start for step_start, step_end in steps)


def _union(intervals) -> list[list[int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _overlap(intervals, steps) -> int:
    return sum(max(0, min(end, step_end) - max(start, step_start))
               for start, end in intervals for step_start, step_end in steps)


def check_parameters(*, replicas, per_replica_batch, scaling_epochs, split_rounds, max_images,
                     workers, global_batch_size, worker_steps, checkpoint_every, kill_at_step,
                     profile_steps, decode_ms, work_dir, open_ports):
    """Notebook 08's parameters, checked before any work: one line names a wrong one."""
    images = max_images if isinstance(max_images, int) and max_images >= 256 else 10**12  # valid
    most = images // replicas if isinstance(replicas, int) and replicas > 0 else images
    return rules.validate(
        replicas=(replicas, rules.integer(1, 64)),
        per_replica_batch=(per_replica_batch, rules.all_of(rules.integer(1, 4096), rules.check(
            lambda v: v <= most, f"at most {most}: the sweep's widest global batch, per_replica_"
            f"batch x replicas={replicas}, must fit in max_images={max_images}"))),
        scaling_epochs=(scaling_epochs, rules.integer(2, 100)),
        split_rounds=(split_rounds, rules.integer(1, 50)),
        max_images=(max_images, rules.all_of(rules.integer(256, 10_000_000),
                                             rules.fits_in_memory(8 * 28 * 28))),
        workers=(workers, rules.integer(1, 8)),
        global_batch_size=(global_batch_size, rules.all_of(batch_rule(workers), rules.check(
            lambda v: v <= images, f"at most max_images={max_images}, the images it trains on"))),
        worker_steps=(worker_steps, rules.integer(2, 1_000_000)),
        checkpoint_every=(checkpoint_every, rules.integer(1, 1_000_000)),
        kill_at_step=(kill_at_step, rules.check(
            lambda v: v == 0 or (isinstance(v, int) and checkpoint_every < v < worker_steps),
            f"expected 0 or a step after checkpoint_every={checkpoint_every} and before "
            f"worker_steps={worker_steps}")),
        profile_steps=(profile_steps, rules.integer(1, 1000)),
        decode_ms=(decode_ms, rules.number(0, 1000)),
        work_dir=(work_dir, rules.folder()),
        open_ports=(open_ports, rules.boolean()))
