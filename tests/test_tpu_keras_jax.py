"""Notebook 09's plumbing (helpers.tpu_keras_jax) and its exercise checks, with right and wrong
answers, on Keras 3 on JAX with 8 host devices.

`make tpu-unit` runs this file alone on the TPU stack, with what the notebook's first cell
sets (KERAS_BACKEND=jax, 8 host devices); elsewhere (Keras on TensorFlow) it is skipped.
"""

import os
import sys
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.tpu
if os.environ.get("KERAS_BACKEND") != "jax":
    pytest.skip("needs KERAS_BACKEND=jax from the start (make tpu-unit)", allow_module_level=True)

jax = pytest.importorskip("jax")
keras = pytest.importorskip("keras")
import numpy as np  # noqa: E402
from solved import solution_functions  # noqa: E402

from helpers import exercises, tpu_keras_jax, yardstick  # noqa: E402
from helpers.errors import EngineError  # noqa: E402

SOLUTIONS = solution_functions("09_tpu_keras_jax", jax=jax, keras=keras, np=np)


def verdict(exercise, *answer, **named):
    return exercises.check(exercise, *answer, **named)


def test_eight_host_devices_as_the_notebook_makes_them():
    assert len(jax.devices()) == 8 and jax.default_backend() == "cpu"
    assert tpu_keras_jax.describe(jax.default_backend(), 8) == (
        "8 simulated CPU device(s) (no TPU here)")
    assert tpu_keras_jax.describe("tpu", 8, "TPU v5 lite") == "8 TPU v5 lite chip(s)"


def test_the_backend_check_passes_here_and_names_a_restart_elsewhere(monkeypatch):
    tpu_keras_jax.require_jax_backend()
    fake = SimpleNamespace(backend=SimpleNamespace(backend=lambda: "tensorflow"))
    monkeypatch.setitem(sys.modules, "keras", SimpleNamespace(backend=fake.backend))
    with pytest.raises(EngineError, match="Keras runs on tensorflow .* Restart the kernel"):
        tpu_keras_jax.require_jax_backend()


def test_each_run_is_judged_against_float64_beside_the_runs_own_rounding():
    exact = {"loss": 1.0, "weights": [np.full(3, 1.0)], "start": [np.zeros(3)]}
    own = {"loss": 1.0, "weights": [np.full(3, 1.001)], "start": [np.zeros(3)]}
    near = {"loss": 1.0, "weights": [np.full(3, 0.9985)], "start": [np.zeros(3)]}
    far = {"loss": 1.5, "weights": [np.full(3, 2.0)], "start": [np.zeros(3)]}
    table, lines = tpu_keras_jax.against_float64(
        {"m": {"1": own, "8": near, "wrong": far, "64": exact}}, "64", "1")
    assert [row[1:] for row in table.rows] == [["1", "0.00e+00", "1.00e-03"],
                                               ["8", "0.00e+00", "1.50e-03"],
                                               ["wrong", "5.00e-01", "1.00e+00"]]
    assert lines == [yardstick.line("m, 8", 1.5e-3, 1e-3), yardstick.line("m, wrong", 1.0, 1e-3)]
    assert lines[0].endswith("rounding, the same update.") and lines[1].endswith("another update.")


def test_a_step_too_small_for_float32_weights_is_refused():
    """An update far smaller than its weights is rounded by their float32 storage alone, in every
    run alike, so the yardstick would measure the storage, not the sums: against_float64 refuses."""
    start = [np.full(3, 1.0)]
    exact = {"loss": 1.0, "weights": [np.full(3, 1.0 + 1e-6)], "start": start}
    own = {"loss": 1.0, "weights": [np.full(3, np.float32(1.0 + 1e-6))], "start": start}
    with pytest.raises(AssertionError, match="a step too small"):
        tpu_keras_jax.against_float64({"m": {"1": own, "64": exact}}, "64", "1")
    far = {name: {**run, "weights": [w * 1e6 for w in run["weights"]]}
           for name, run in {"1": own, "64": exact}.items()}  # the control: a step 1e6 times as far
    far["1"]["weights"][0][0] *= 1 + 1e-5
    tpu_keras_jax.against_float64({"m": far}, "64", "1")


def test_the_float64_reference_builds_every_layer_in_float64():
    """09's reference step: notebook 04's networks keep two outputs in float32 under a mixed
    policy; in_float64 computes those in float64 too (the logit's Dense keeps its float32
    variables), without importing TensorFlow (Keras's serialization would, where installed)."""
    from helpers.lessons import nb09

    had_tensorflow = "tensorflow" in sys.modules
    jax.config.update("jax_enable_x64", True)
    try:
        _, state, models = nb09.build_gan(jax.devices()[:1], 8, "float64")
    finally:
        jax.config.update("jax_enable_x64", False)
    assert {layer.compute_dtype for m in models[:2] for layer in m.layers} == {"float64"}
    kept = [v.dtype for v in state[0] + state[2] if v.dtype != "float64"]
    assert kept == ["float32", "float32"], "only the logit's Dense kernel and bias"
    assert had_tensorflow or "tensorflow" not in sys.modules


def test_the_dcgan_step_runs_each_network_once_per_batch_and_compiles_once(monkeypatch):
    """One forward pass feeds both losses: the generator runs once, the discriminator once on
    the real batch and once on the generated one (04's step); the step compiles at its first
    call only, with the key and data on the devices."""
    from helpers.lessons import nb09

    step, state, models = nb09.build_gan(jax.devices(), 16, "float32")
    calls = {}
    for model in models[:2]:
        def counted(*args, _call=model.stateless_call, _name=model.name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _call(*args, **kwargs)
        monkeypatch.setattr(model, "stateless_call", counted)
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, fun_name="", **_: compiles.append(fun_name)
        if event == "/jax/core/compile/backend_compile_duration" else None)
    images = jax.device_put(np.zeros((32, 28, 28, 1), "float32"))
    for i in range(3):
        state, losses = step(state, images, i)
    assert calls == {"tutorial_generator": 1, "tutorial_discriminator": 2}  # traced once
    assert compiles.count("jit(step)") == 1 and np.all(np.isfinite(jax.device_get(losses)))
    for variable, value in zip(sum(nb09.variables_of(models), []), sum(state[:6], []),
                               strict=True):
        variable.assign(value)  # the notebook's hand-back: the generator samples again
    assert models[0](np.zeros((2, 100), "float32"), training=False).shape == (2, 28, 28, 1)


def test_seed_keras_gives_set_random_seeds_weights_without_importing_tensorflow():
    """09 seeds with `seed_keras`: the weights `keras.utils.set_random_seed` gives, without
    the TensorFlow import that call makes wherever TensorFlow is installed (Kaggle's image)."""
    from helpers.lessons.dcgan_networks import tutorial_generator
    from helpers.lessons.nb09 import seed_keras

    had_tensorflow = "tensorflow" in sys.modules

    def weights(seed):
        seed(0)
        return [np.asarray(w) for w in tutorial_generator().get_weights()]

    ours = weights(seed_keras)
    assert had_tensorflow or "tensorflow" not in sys.modules, "seed_keras imported TensorFlow"
    theirs, again = weights(keras.utils.set_random_seed), weights(seed_keras)
    assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(ours, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(ours, weights(lambda s: seed_keras(1)),
                                                         strict=True)), "another seed differs"


def test_steps_per_execution_at_most_an_epoch():
    ok = dict(global_batch_size=64, rounds=3, timed_steps=4, max_images=256, use_bfloat16=True)
    assert tpu_keras_jax.check_parameters(steps_per_execution=4, **ok).steps_per_execution == 4
    with pytest.raises(Exception, match="steps_per_execution=5: at most the 4 steps of an epoch"):
        tpu_keras_jax.check_parameters(steps_per_execution=5, **ok)
    tpu_keras_jax.check_loaded(4, images=1498, global_batch_size=256)  # 5 steps: 4 fit
    refused = "steps_per_execution=16: at most 5, the whole global batches in the 1498 images"
    with pytest.raises(Exception, match=refused):  # the stand-in for max_images=4096's MNIST
        tpu_keras_jax.check_loaded(16, images=1498, global_batch_size=256)


def test_the_lever_sentence_groups_the_rows_by_their_verdicts_round_by_round():
    base = "one device, as configured"
    rates = {base: [100, 105, 110, 115, 120], "again": [99, 108, 105, 118, 117],
             "float32": [300, 305, 310, 315, 320], "quarter": [40, 45, 50, 55, 60]}
    table, said = tpu_keras_jax.levers(rates, base)
    rows = {row[0]: row for row in table.rows}
    assert rows[base] == [base, "110 (100-120)", ""]
    assert rows["float32"][1:] == ["310 (300-320)", "2.82x (2.67-3.00x), faster in every round"]
    assert rows["quarter"][2] == "0.45x (0.40-0.50x), slower in every round"
    assert rows["again"][2].endswith("no clear difference (the rounds disagree, or come within 3%)")
    assert said == (f"Against {base}, round by round: again (0.99x): no clear difference (the "
                    "rounds disagree, or come within 3%); float32 (2.82x): faster in every "
                    "round; quarter (0.45x): "
                    "slower in every round.")
    # fewer than 5 timed rounds: the medians and their range, no verdict
    table, said = tpu_keras_jax.levers({base: [100, 120], "again": [99, 111]}, base)
    assert "110 (100-120)" in str(table) and "in every round" not in said
    assert said == (f"Against {base}, round by round: again (0.96x): too few rounds (2) to tell: "
                    "pass rounds >= 6.")


# Exercise 09.1: a pure training step. Each wrong answer is a typical mistake.
def _step(loss_of, keep_stats=True, jit=True):
    def classifier_step(model, optimizer):
        def loss_fn(trainable, non_trainable, x, y):
            logits, new = model.stateless_call(trainable, non_trainable, x, training=True)
            return loss_of(y, logits), (new if keep_stats else non_trainable)

        def step(state, x, y):
            trainable, non_trainable, opt_vars = state
            (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                trainable, non_trainable, x, y)
            trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
            return (trainable, non_trainable, opt_vars), loss

        return jax.jit(step) if jit else step
    return classifier_step


def _mean_ce(y, logits):
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits,
                                                                       from_logits=True))


def _grad_then_loss(model, optimizer):  # jax.grad with the loss carried in the aux output
    def loss_fn(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        loss = _mean_ce(y, logits)
        return loss, (loss, non_trainable)

    @jax.jit
    def step(state, x, y):
        grads, (loss, non_trainable) = jax.grad(loss_fn, has_aux=True)(state[0], state[1], x, y)
        trainable, opt_vars = optimizer.stateless_apply(state[2], grads, state[0])
        return (trainable, non_trainable, opt_vars), loss
    return step


def _donating(model, optimizer):  # the notebook's own habit: the old state's buffers donated
    def step(state, x, y):
        trainable, non_trainable, opt_vars = state
        def loss_fn(t):
            logits, new = model.stateless_call(t, non_trainable, x, training=True)
            return keras.ops.mean(keras.ops.sparse_categorical_crossentropy(
                y, logits, from_logits=True)), new
        (loss, new), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return [trainable, new, opt_vars], loss
    return jax.jit(step, donate_argnums=0)


RIGHT_09_1 = {
    "the solution": SOLUTIONS["classifier_step"],
    "a Loss object, not jitted": _step(
        lambda y, z: keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, z),
        jit=False),
    "jax.grad with the loss as aux": _grad_then_loss,
    "a closure over x and y, state donated, a list back": _donating,
}
WRONG_09_1 = {
    "the sum, not the mean": (_step(lambda y, z: keras.ops.sum(
        keras.losses.sparse_categorical_crossentropy(y, z, from_logits=True))), "Your loss is"),
    "probabilities, not logits": (_step(lambda y, z: keras.ops.mean(
        keras.losses.sparse_categorical_crossentropy(y, z))), "Your loss is"),
    "batch norm's statistics dropped": (_step(_mean_ce, keep_stats=False),
                                        "non-trainable values"),
    "no update at all": (lambda model, optimizer: jax.jit(
        lambda state, x, y: (state, _mean_ce(y, model.stateless_call(
            state[0], state[1], x, training=True)[0]))), "trainable weights"),
}


@pytest.mark.parametrize("name", RIGHT_09_1)
def test_09_1_accepts_right_answers(name):
    assert verdict("09.1", RIGHT_09_1[name]).passed


@pytest.mark.parametrize("name", WRONG_09_1)
def test_09_1_names_the_mistake(name):
    answer, said = WRONG_09_1[name]
    result = verdict("09.1", answer)
    assert not result.passed and said in result.message, result.message


def _stale_optimizer(model, optimizer):
    step = SOLUTIONS["classifier_step"](model, optimizer)

    def keep_optimizer_state(state, x, y):
        new, loss = step(state, x, y)
        return (new[0], new[1], state[2]), loss
    return keep_optimizer_state


WRONG_09_1["the optimizer's state not carried"] = (_stale_optimizer, "optimizer variables")
WRONG_09_1["divided by 32, a batch size written in"] = (_step(lambda y, z: keras.ops.sum(
    keras.losses.sparse_categorical_crossentropy(y, z, from_logits=True)) / 32), "Your loss is")
WRONG_09_1["weights of 1/32 written in"] = (_step(lambda y, z: keras.ops.sum(
    keras.losses.sparse_categorical_crossentropy(y, z, from_logits=True)
    * keras.ops.full((32,), 1 / 32))), "Your code raised")
WRONG_09_1["labels reshaped to 32"] = (_step(lambda y, z: _mean_ce(keras.ops.reshape(y, (32,)), z)),
                                       "Your code raised")


def test_09_1_under_the_notebooks_global_distribution():
    """Notebook 09 sets a DataParallel over every device before its exercises."""
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
    try:
        assert verdict("09.1", SOLUTIONS["classifier_step"]).passed
        assert not verdict("09.1", WRONG_09_1["the sum, not the mean"][0]).passed
    finally:
        keras.distribution.set_distribution(None)


def _changes_keras(model, optimizer):  # right, and leaves a policy and a distribution set
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()[:2]))
    return SOLUTIONS["classifier_step"](model, optimizer)


def _distribution_and_the_sum(model, optimizer):  # wrong, and a distribution left set
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
    return WRONG_09_1["the sum, not the mean"][0](model, optimizer)


def _policy_then_raises(model, optimizer):  # a mistake after changing the global policy
    keras.mixed_precision.set_global_policy("mixed_float16")
    raise RuntimeError("a mistake after setting a policy")


def _policy_inside_the_step(model, optimizer):  # wrong (probabilities), a policy set each step
    step = WRONG_09_1["probabilities, not logits"][0](model, optimizer)

    def each(state, x, y):
        keras.mixed_precision.set_global_policy("bfloat16")
        return step(state, x, y)
    return each


@pytest.mark.parametrize("answer, right, said", [
    (_changes_keras, True, ""), (_distribution_and_the_sum, False, "Your loss is"),
    (_policy_then_raises, False, "Your code raised RuntimeError"),
    (_policy_inside_the_step, False, "Your loss is")],
    ids=["policy and distribution left set", "distribution left set, the sum",
         "policy set, then raises", "policy set in the step, probabilities"])
@pytest.mark.parametrize("kernel", [None, "DataParallel"], ids=["no distribution", "09's"])
def test_09_1_puts_keras_distribution_and_policy_back_whatever_the_answer_sets(
        answer, right, said, kernel):
    found = kernel and keras.distribution.DataParallel(devices=jax.devices())
    keras.distribution.set_distribution(found)
    try:
        result = verdict("09.1", answer)
        assert result.passed == right and said in result.message, result.message
        assert keras.distribution.distribution() is found
        assert keras.mixed_precision.global_policy().name == "float32"
    finally:
        keras.distribution.set_distribution(None)


def test_09_1_in_a_kernel_left_in_another_policy_says_so_and_judges(capsys):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")  # an earlier cell or attempt
    try:
        result = verdict("09.1", SOLUTIONS["classifier_step"])
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16", "as found"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    said = capsys.readouterr().out.splitlines()
    assert result.passed and len(said) == 2 and said[1].startswith("✅ Exercise 09.1")
    assert said[0] == ("Keras's global dtype policy is 'mixed_bfloat16' in this kernel (a cell or "
                       "an earlier attempt set it): the check ran in float32, then set it back.")


#: every order of three answers (0, 1, 2), each as three checks in a row, in 9 checks, not 18
ORDERS = (0, 1, 2, 0, 1, 0, 2, 1, 0)


def test_every_check_passes_its_solution_after_any_attempts_in_one_process():
    """Issue 50: a wrong answer, one that changes Keras's global state, then the solution, in
    every order in this process: the same verdict every time, the solution's "right"."""
    answers = {"09.1": ((WRONG_09_1["probabilities, not logits"][0], False),
                        (_changes_keras, True), (SOLUTIONS["classifier_step"], True)),
               "09.2": ((lambda a, d: SOLUTIONS["split_batch"](a.astype("float16"), d), False),
                        (_every_device, False), (SOLUTIONS["split_batch"], True))}
    for exercise, tries in answers.items():
        named = {"devices": jax.devices()} if exercise == "09.2" else {}
        got = [(i, verdict(exercise, tries[i][0], **named).passed) for i in ORDERS]
        assert got == [(i, tries[i][1]) for i in ORDERS], exercise
        assert keras.mixed_precision.global_policy().name == "float32"
        assert keras.distribution.distribution() is None


def test_09_1_untouched():
    result = verdict("09.1", lambda model, optimizer: None)
    assert not result.passed and "placeholder" in result.message


def _distribute_tensor(array, device_list):
    distribution = keras.distribution.DataParallel(devices=device_list)
    return keras.distribution.distribute_tensor(array, distribution.get_data_layout(array.shape))


def _make_mesh(array, device_list):
    mesh = jax.make_mesh((len(device_list),), ("data",), devices=device_list)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    return jax.device_put(array, sharding)


def _from_pieces(array, device_list):  # each device given its rows, then one global array
    mesh = jax.sharding.Mesh(np.array(device_list), ("rows",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("rows"))
    pieces = np.split(np.asarray(array), len(device_list))
    return jax.make_array_from_single_device_arrays(
        array.shape, sharding,
        [jax.device_put(p, d) for p, d in zip(pieces, device_list, strict=True)])


@pytest.mark.parametrize("answer", [SOLUTIONS["split_batch"], _distribute_tensor, _make_mesh,
                                    _from_pieces],
                         ids=["the solution", "keras.distribution.distribute_tensor",
                              "jax.make_mesh", "single-device pieces"])
def test_09_2_accepts_right_answers(answer):
    assert verdict("09.2", answer, devices=jax.devices()).passed


def _rank_written_in(array, device_list):  # a spec for two axes: fails on other ranks
    mesh = jax.sharding.Mesh(np.array(device_list), ("batch",))
    return jax.device_put(array, jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("batch", None)))


def _every_device(array, device_list):  # jax.devices(), not the devices given
    return SOLUTIONS["split_batch"](array, jax.devices())


def _eight_rows_each(array, device_list):  # the pieces cut 8 rows at a time
    sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(device_list), ("b",)),
                                          jax.sharding.PartitionSpec("b"))
    return jax.make_array_from_single_device_arrays(array.shape, sharding, [
        jax.device_put(array[8 * i:8 * i + 8], d) for i, d in enumerate(device_list)])


@pytest.mark.parametrize("answer, said", [
    (lambda a, d: jax.device_put(a, d[0]), "Given 8 device(s), it lives on 1 device(s)"),
    (lambda a, d: jax.device_put(a, jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array(d), ("batch",)), jax.sharding.PartitionSpec())),
     "do not copy the whole array"),
    (lambda a, d: a, "not a JAX array"),
    (lambda a, d: jax.device_put(a * 2, d[0]), "not the array's"),
    (lambda a, d: SOLUTIONS["split_batch"](a.astype(jax.numpy.bfloat16), d),
     "(bfloat16; the array's: float32)"),
    (lambda a, d: SOLUTIONS["split_batch"](a.astype("float16"), d),
     "(float16; the array's: float32)"),
    (lambda a, d: SOLUTIONS["split_batch"](np.asarray(a, "float32"), d),
     "(float32; the array's: int32)"),
    (_rank_written_in, "Your code raised ValueError"),
    (_every_device, "Given 2 device(s), it lives on 8 device(s)"),
    (_eight_rows_each, "Your code raised ValueError"),
], ids=["one device", "replicated", "a numpy array", "changed values", "cast to bfloat16",
        "cast to float16", "made float32", "two axes written in", "every device",
        "eight rows each written in"])
def test_09_2_names_the_mistake(answer, said):
    result = verdict("09.2", answer, devices=jax.devices())
    assert not result.passed and said in result.message, result.message


def test_keras_on_jax_computes_batch_norm_in_float32_unless_09s_float64_lifts_it(monkeypatch):
    """Why 09's float64() sets Keras's private BIT64_TO_BIT32_DTYPE: Keras on JAX promotes
    float64 to float32, so BatchNormalization (which computes in result_type(inputs, float32))
    sums a float64 batch in float32, and a reference with it shares the float32 run's sums."""
    from keras.src.backend.common import dtypes

    values = 1000 + np.random.default_rng(0).normal(size=(64, 4, 4, 3))  # float32 loses the spread
    exact = (values - values.mean((0, 1, 2))) / np.sqrt(values.var((0, 1, 2)) + 1e-3)
    jax.config.update("jax_enable_x64", True)
    try:
        gaps = []
        for lifted in (False, True):
            if lifted:
                monkeypatch.setitem(dtypes.BIT64_TO_BIT32_DTYPE, "float64", "float64")
            promoted = keras.backend.result_type("float64", "float32")
            layer = keras.layers.BatchNormalization(dtype="float64")
            out = np.asarray(layer(jax.numpy.asarray(values), training=True), "float64")
            gaps.append((promoted, float(np.max(np.abs(out - exact)))))
    finally:
        jax.config.update("jax_enable_x64", False)
    (narrowed, in_float32), (kept, in_float64) = gaps
    assert (narrowed, kept) == ("float32", "float64")
    assert in_float32 > 1e-5 and in_float64 < 1e-9, gaps
