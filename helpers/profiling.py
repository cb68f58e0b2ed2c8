"""Capture a TensorFlow profiler trace of a few training steps, and read it without TensorBoard.

The profiler writes ``plugins/profile/<run>/<host>.xplane.pb`` (an ``XSpace`` protocol buffer):
planes (the host, each GPU or TPU), lines (threads, GPU streams) and timed events. Reading it
needs only the proto that ships with TensorFlow, so the notebook can show the top operations,
the share of step time spent waiting for input, and device idle time, even where the
TensorBoard profile plugin is not installed (it is not, with TF 2.21).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import statistics
from pathlib import Path

#: the name of the step markers notebook 07's ``capture`` writes into the trace
STEP_NAME = "train"
#: a TensorFlow op event: "scope/op_name:OpType"
OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
#: events where a step waits for its next input batch
INPUT_EVENTS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
#: prefixes oneDNN puts in front of op types on a CPU
_CPU_PREFIXES = re.compile(r"^_(MklNative|MklFused|Mkl|Fused)")
#: op types that do a model's heavy arithmetic
HEAVY_OPS = re.compile(r"Conv|MatMul|Einsum|convolution|dot|gemm|cutlass|xmma", re.IGNORECASE)


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
        return statistics.median(self.step_ms)

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


def advice(summary: TraceSummary, input_bound: float = 0.2, idle: float = 0.3) -> list[str]:
    """What the figures imply, most important first."""
    lines = []
    if summary.input_share > input_bound:
        lines.append(
            f"Input-bound: {summary.input_share:.0%} of step time waits for data. Prefetch, "
            "map in parallel, cache what fits, read TFRecords (notebook 03)."
        )
    if summary.idle_share - summary.input_share > idle:
        lines.append(
            f"The device idles {summary.idle_share:.0%} of the step between small ops: "
            "use a larger batch, run several steps per call (a tf.range loop, "
            "steps_per_execution), and on a GPU try XLA (jit_compile=True)."
        )
    types = summary.by_type()
    heavy = sum(share for kind, _, share in types if HEAVY_OPS.search(kind))
    if heavy >= 0.5:
        lines.append(
            f"Compute-bound in convolutions and matmuls ({heavy:.0%} of op time): mixed "
            "precision uses the Tensor Cores (GPU) or bfloat16 units (TPU, recent CPUs)."
        )
    elif types:
        light = next((kind for kind, _, _ in types if not HEAVY_OPS.search(kind)), types[0][0])
        lines.append(
            f"Convolutions and matmuls are only {heavy:.0%} of op time; the rest is many small "
            f"ops (the largest kind: {light}). XLA fuses them on a GPU or TPU."
        )
    return lines


def classifier_step(x, y, batch: int, decode_ms: float = 0.0, tuned: bool = False):
    """The classifier's training step on one device, fed through a ``map`` that waits
    ``decode_ms`` per batch (a stand-in for decoding images). Untuned: the map runs one batch
    at a time, in line with training. Tuned: a parallel map and prefetch, so the waits overlap
    the steps; eight calls at once, since a decode that waits (here, or on storage) does not
    use a core. Returns a ``step()`` for notebook 07's ``capture``."""
    import time as clock

    import keras
    import tensorflow as tf

    from helpers.models import replica_classifier

    def decode(images, labels):
        def wait(batch_images):
            clock.sleep(decode_ms / 1000)
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
