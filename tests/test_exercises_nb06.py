"""Notebook 06's exercise checks: each says "right" to its solution (the block in
solutions/06_data_parallel.py) and to right answers written differently, and "not yet", with
the expected reason, to the untouched exercise and to the usual mistakes.

The checks run real ``tf.distribute`` code on the notebook's strategy, so the answers run in a
process of their own whose CPU is split into 8 logical devices, as the notebook splits it
(this test process started TensorFlow long ago)."""

import json
import textwrap

import pytest

UNTOUCHED = "still holds its placeholder"

# 06.1: (name, source of global_loss, right, what the verdict must say)
GLOBAL_LOSS = [
    ("solution", None, True, "right"),
    ("untouched", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    """docstring"""
    ...
''', False, UNTOUCHED),
    ("sum-then-divide", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    sums = strategy.run(lambda b: tf.reduce_sum(per_example_loss(b)), args=(dist_batch,))
    return strategy.reduce("SUM", sums, axis=None) / global_batch_size
''', True, "right"),
    ("divided-inside-by-hand", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    def share(b):
        return tf.reduce_sum(per_example_loss(b)) / tf.cast(global_batch_size, tf.float32)
    return float(strategy.reduce(tf.distribute.ReduceOp.SUM,
                                 strategy.run(share, args=(dist_batch,)), axis=None))
''', True, "right"),
    ("per-replica-means-summed", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    means = strategy.run(lambda b: tf.reduce_mean(per_example_loss(b)), args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, means, axis=None)
''', False, "each replica's own mean"),
    ("reduced-with-mean", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    share = strategy.run(lambda b: tf.nn.compute_average_loss(
        per_example_loss(b), global_batch_size=global_batch_size), args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, share, axis=None)
''', False, "reduce with ReduceOp.SUM"),
    ("per-replica-means-averaged", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    means = strategy.run(lambda b: tf.reduce_mean(per_example_loss(b)), args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, means, axis=None)
''', False, "divided by zero"),  # right on equal shares only: the short batch shows it
    ("not-reduced", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    return strategy.run(lambda b: tf.nn.compute_average_loss(
        per_example_loss(b), global_batch_size=global_batch_size), args=(dist_batch,))
''', False, "one value per replica"),
    ("local-results-summed", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    def part(share):
        return tf.reduce_sum(per_example_loss(share)) / global_batch_size
    shares = strategy.experimental_local_results(strategy.run(part, args=(dist_batch,)))
    return sum(float(v) for v in shares)
''', True, "right"),  # accepted, as the task says: the same number on one machine
    ("average-without-global-size", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    def replica_loss(b):
        return tf.nn.compute_average_loss(per_example_loss(b))
    out = strategy.run(replica_loss, args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)
''', False, "not the global batch's mean loss"),  # right on even shares only
    ("per-replica-means-summed-one-replica", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    means = strategy.run(lambda b: tf.reduce_mean(per_example_loss(b)), args=(dist_batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, means, axis=None)
''', False, "needs 2 or more replicas"),  # it used to pass there: one replica's mean is right
    ("no-strategy-run", '''
def global_loss(strategy, per_example_loss, dist_batch, global_batch_size):
    return tf.reduce_mean(per_example_loss(dist_batch))
''', False, "Your code raised"),
]

# 06.2: (name, source of array_input_fn, right, what the verdict must say)
INPUT_FN = [
    ("solution", None, True, "right"),
    ("untouched", '''
def array_input_fn(x, y, global_batch):
    """docstring"""
    ...
''', False, UNTOUCHED),
    ("shard-after-batch-divide-by-hand", '''
def array_input_fn(x, y, global_batch):
    def input_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=1)
        ds = ds.batch(global_batch // ctx.num_replicas_in_sync, drop_remainder=True)
        return ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return input_fn
''', True, "right"),
    ("numpy-slices", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        n, i = context.num_input_pipelines, context.input_pipeline_id
        return tf.data.Dataset.from_tensor_slices((x[i::n], y[i::n])).batch(
            context.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', True, "right"),
    ("contiguous-blocks", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        size = len(x) // context.num_input_pipelines
        start = context.input_pipeline_id * size
        ds = tf.data.Dataset.from_tensor_slices((x[start:start + size], y[start:start + size]))
        return ds.batch(global_batch // context.num_replicas_in_sync, drop_remainder=True)
    return input_fn
''', True, "right"),
    ("filter-by-index", '''
def array_input_fn(x, y, global_batch):
    def input_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).enumerate()
        mine = ds.filter(lambda i, xy: i % ctx.num_input_pipelines == ctx.input_pipeline_id)
        mine = mine.map(lambda i, xy: xy)
        return mine.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', True, "right"),
    ("auto-shard-option", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.batch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA)
        return ds.with_options(options)  # tf.distribute shards it... not for an input_fn
    return input_fn
''', False, "read more than once"),
    ("per-pipeline-batch", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(global_batch // context.num_input_pipelines, drop_remainder=True)
    return input_fn
''', False, "not the per-replica size"),
    ("short-last-batch", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(context.get_per_replica_batch_size(global_batch))
    return input_fn
''', False, "drop_remainder=True"),
    ("unseeded-shuffle-first", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', False, "shard first"),
    ("no-shard", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(
            context.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', False, "read more than once"),
    ("global-batch", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(global_batch, drop_remainder=True)
    return input_fn
''', False, "not the per-replica size"),
    ("shard-by-replicas", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_replicas_in_sync, context.input_pipeline_id)
        return ds.batch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', False, "never read"),
    ("repeated", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id).repeat()
        return ds.batch(context.get_per_replica_batch_size(global_batch), drop_remainder=True)
    return input_fn
''', False, "no `repeat`"),
    # issue 50: the check passed a global batch of 24 only
    ("24-written-in", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(24 // context.num_replicas_in_sync, drop_remainder=True)
    return input_fn
''', False, "not the per-replica size 48 (the global batch 48 over 1 replicas)"),
    ("per-replica-of-24", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(context.get_per_replica_batch_size(24), drop_remainder=True)
    return input_fn
''', False, "a batch holds 24 examples, not the per-replica size 48"),
    ("remainder-filtered-for-24", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        per_replica = context.get_per_replica_batch_size(global_batch)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id).batch(per_replica)
        return ds.filter(lambda xs, ys: tf.shape(ys)[0] == 24 // context.num_replicas_in_sync)
    return input_fn
''', False, "of the 100 examples are never read"),
    ("short-last-batch-on-48", '''
def array_input_fn(x, y, global_batch):
    def input_fn(context):
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(context.get_per_replica_batch_size(global_batch),
                        drop_remainder=global_batch == 24)
    return input_fn
''', False, "the remainder of the share"),
    ("returns-the-dataset", '''
def array_input_fn(x, y, global_batch):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
''', False, "return the input function itself"),
]

CHILD = textwrap.dedent("""
    import json, sys
    from helpers.devices import mirrored, split_devices
    from helpers.exercises import check
    from helpers.logs import import_tensorflow
    from solved import solution_functions
    tf = import_tensorflow()
    split_devices(8)
    strategy = mirrored([d.name for d in tf.config.list_logical_devices("CPU")])
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    solved = solution_functions("06_data_parallel", tf=tf)
    cases = json.loads(sys.argv[1])
    results = {}
    for exercise, name, function, source in cases:
        space = {"tf": tf}
        if source is None:
            answer = solved[function]
        else:
            exec(source, space)
            answer = space[function]
        on = one if name.endswith("one-replica") else strategy
        extra = (on,) if exercise == "06.1" else ()
        verdict = check(exercise, answer, *extra)
        results[f"{exercise} {name}"] = [verdict.passed, verdict.message]
    print("RESULTS" + json.dumps(results))
""")


@pytest.fixture(scope="module")
def verdicts(fresh_process, tmp_path_factory):
    cases = [("06.1", name, "global_loss", source) for name, source, *_ in GLOBAL_LOSS]
    cases += [("06.2", name, "array_input_fn", source) for name, source, *_ in INPUT_FN]
    script = tmp_path_factory.mktemp("nb06") / "answers.py"
    script.write_text(CHILD)
    done = fresh_process(script=script, args=(json.dumps(cases),))
    assert done.returncode == 0, done.output[-3000:]
    return json.loads(done.output.split("RESULTS", 1)[1].splitlines()[0])


@pytest.mark.parametrize(("exercise", "name", "right", "says"), [
    *[("06.1", name, right, says) for name, _, right, says in GLOBAL_LOSS],
    *[("06.2", name, right, says) for name, _, right, says in INPUT_FN],
], ids=lambda value: value if isinstance(value, str) and " " not in value else None)
def test_answer(verdicts, record, exercise, name, right, says):
    passed, message = verdicts[f"{exercise} {name}"]
    record(exercise, passed, message, solution=name == "solution")
    assert passed == right, message
    if not right:
        assert says in message
