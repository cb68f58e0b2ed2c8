import time
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import scale_out_profile


def capture(*args, **kwargs):
    """Notebook 08's (imported when used: the lesson module imports TensorFlow)."""
    from helpers.lessons.nb08 import capture

    return capture(*args, **kwargs)


def test_interval_union_and_overlap():
    assert scale_out_profile._union([(5, 8), (0, 2), (1, 3), (8, 9)]) == [[0, 3], [5, 9]]
    assert scale_out_profile._overlap([(0, 3), (5, 9)], [(2, 6), (8, 20)]) == 1 + 1 + 1


def test_the_reader_finds_the_steps_top_op(tf, tmp_path):
    a = tf.random.normal((768, 768))

    @tf.function
    def step():
        return tf.reduce_sum(tf.matmul(a, a))

    summary = scale_out_profile.read_trace(capture(step, 3, tmp_path))
    assert len(summary.step_ms) == 3
    # the matmul is found in every traced step (a CPU op, or a GPU kernel named by its op);
    # which share of the time it takes is the machine's business
    matmuls = [op for op in summary.ops if op.type == "MatMul"]
    assert matmuls and sum(op.count for op in matmuls) >= 3
    assert sum(share for _, _, share in summary.by_type()) == pytest.approx(1.0)
    assert summary.input_share == 0  # no input pipeline in this step


def _train_step(tf, dataset):
    """A step of a few milliseconds, so that taking a prefetched batch is a small share of it."""
    w = tf.Variable(tf.fill((384, 384), 0.001))
    iterator = iter(dataset)

    @tf.function
    def step():
        x = next(iterator)
        with tf.GradientTape() as tape:
            h = tf.matmul(tf.matmul(tf.matmul(x, w), w), w)
            loss = tf.reduce_mean(tf.square(h - 1.0))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        return loss

    return step


def test_a_real_trace_marks_every_step_and_finds_its_input_waits(tf, tmp_path):
    """A real capture: every marked step is there and each step's wait for its batch is
    found (how large a share that is depends on the machine: the synthetic traces below
    check the arithmetic and the advice)."""
    x = np.ones((384, 384), "float32")

    def slow(batch):
        def wait(b):
            time.sleep(0.03)
            return b

        out = tf.py_function(wait, [batch], tf.float32)
        out.set_shape(batch.shape)
        return out

    slowed = tf.data.Dataset.from_tensors(x).repeat().map(slow)
    path = capture(_train_step(tf, slowed), 4, tmp_path)
    summary = scale_out_profile.read_trace(path)
    assert len(summary.step_ms) == 4 and summary.input_share > 0
    assert 0 <= summary.idle_share <= 1 and summary.ops
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    host = next(plane for plane in space.planes if plane.name == "/host:CPU")
    steps = [(s, e) for s, e, *_ in scale_out_profile._events(
        host, lambda name: name == scale_out_profile.STEP_NAME)]
    inputs = scale_out_profile.INPUT_EVENTS
    waits = [(s, e) for s, e, *_ in scale_out_profile._events(host, lambda name: name in inputs)]
    assert all(any(scale_out_profile._within(*w, [s]) for w in waits) for s in steps)


def test_input_waits_make_a_trace_input_bound(tf, tmp_path):
    from helpers.lessons.nb08 import advice  # notebook 08's reading of a trace

    steps = [(0, 10_000), (10_000, 20_000)]
    kernels = [
        ("Stream #7(Compute)", 8_000, 10_000, "m/MatMul:MatMul"),
        ("Stream #7(Compute)", 18_000, 20_000, "m/MatMul:MatMul"),
    ]
    waiting = scale_out_profile.read_trace(
        _space(tmp_path / "w.xplane.pb", kernels, steps=steps, waits=[(0, 8_000), (10_000, 18_000)])
    )
    assert waiting.input_share == pytest.approx(0.8) and waiting.idle_share == pytest.approx(0.8)
    assert "Input-bound: 80%" in advice(waiting)[0]
    assert any("matmuls take 100% of op time" in line for line in advice(waiting))  # all matmuls
    fed = scale_out_profile.read_trace(_space(tmp_path / "f.xplane.pb", kernels, steps=steps))
    assert fed.input_share == 0 and fed.step_ms == [pytest.approx(0.01)] * 2
    assert not any("Input-bound" in line for line in advice(fed))


def test_advice_says_what_applies_to_the_traced_device(tf):
    from helpers.lessons.nb08 import advice  # notebook 08's reading of a trace

    ops = [("Mul", 3.0, 0.75), ("Conv2D", 1.0, 0.25)]  # mostly small ops
    cpu = SimpleNamespace(device="/host:CPU", input_share=0.0, idle_share=0.5,
                          by_type=lambda: ops)
    idle, small = advice(cpu)
    assert idle.startswith("Idle: the device idles 50%") and "XLA" not in idle
    assert small.startswith("Small ops:") and "on a CPU, time it first" in small
    gpu = advice(SimpleNamespace(**{**vars(cpu), "device": "/device:GPU:0"}))
    assert gpu[1].endswith("XLA (jit_compile=True) fuses them.")


def test_a_trace_without_step_markers_is_refused(tf, tmp_path):
    tf.profiler.experimental.start(str(tmp_path))
    tf.reduce_sum(tf.ones((8, 8))).numpy()
    tf.profiler.experimental.stop()
    path = next(tmp_path.glob("plugins/profile/*/*.xplane.pb"))
    with pytest.raises(ValueError, match="step markers"):
        scale_out_profile.read_trace(path)


def _space(path, device_events, steps=((0, 10_000),), waits=()):
    """Write a small XSpace: step markers and input waits on the host, kernels on a GPU.
    Times in ns; kernels are (line name, start, end, tf_op)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    host = space.planes.add(id=1, name="/host:CPU")
    host.event_metadata[1].id, host.event_metadata[1].name = 1, scale_out_profile.STEP_NAME
    host.event_metadata[2].id, host.event_metadata[2].name = 2, scale_out_profile.INPUT_EVENTS[0]
    line = host.lines.add(id=1, name="python", timestamp_ns=0)
    for start, end in steps:
        line.events.add(metadata_id=1, offset_ps=start * 1000, duration_ps=(end - start) * 1000)
    data_line = host.lines.add(id=2, name="tf_data_iterator_get_next", timestamp_ns=0)
    for start, end in waits:
        data_line.events.add(
            metadata_id=2, offset_ps=start * 1000, duration_ps=(end - start) * 1000
        )
    gpu = space.planes.add(id=2, name="/device:GPU:0")
    gpu.stat_metadata[1].id, gpu.stat_metadata[1].name = 1, "tf_op"
    lines = {}
    for number, (line_name, start, end, op) in enumerate(device_events, start=1):
        if line_name not in lines:
            lines[line_name] = gpu.lines.add(id=len(lines) + 1, name=line_name, timestamp_ns=0)
        gpu.event_metadata[number].id, gpu.event_metadata[number].name = number, f"kernel{number}"
        event = lines[line_name].events.add(
            metadata_id=number, offset_ps=start * 1000, duration_ps=(end - start) * 1000
        )
        event.stats.add(metadata_id=1, str_value=op)
    path.write_bytes(space.SerializeToString())
    return path


def test_gpu_kernels_are_read_from_the_streams_by_their_tensorflow_op(tmp_path):
    events = [
        ("Stream #7(Compute)", 1_000, 5_000, "model/conv/Conv2D:Conv2D"),
        ("Stream #7(Compute)", 5_000, 6_000, "model/relu:Relu"),
        ("Stream #8(Compute)", 5_500, 7_000, "model/dense/MatMul:MatMul"),
        ("XLA Modules", 1_000, 7_000, "ignored:Module"),  # the same time again
    ]
    summary = scale_out_profile.read_trace(
        _space(tmp_path / "t.xplane.pb", events, steps=[(0, 10_000)], waits=[(0, 1_000)])
    )
    assert summary.device == "/device:GPU:0"
    assert [op.type for op in summary.ops] == ["Conv2D", "MatMul", "Relu"]
    assert summary.ops[0].ms == pytest.approx(0.004)
    assert summary.step_ms == [pytest.approx(0.01)]
    assert summary.input_share == pytest.approx(0.1)
    assert summary.idle_share == pytest.approx(0.4)  # busy 1-7 us of 10
