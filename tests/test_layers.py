import inspect

import numpy as np
import pytest

from helpers import dcgan
from helpers.dcgan import FusedBatchNormalization, HalfWordDropout
from helpers.devices import precision


def _op_types(tf, layer, x, training=True) -> set[str]:
    fn = tf.function(lambda inputs: layer(inputs, training=training))
    return {op.type for op in fn.get_concrete_function(x).graph.get_operations()}


def _pair(tf, shape, policy, **kwargs):
    """Keras's batch norm and ours, built on ``shape`` with the same (non-trivial) weights."""
    import keras

    with precision(policy):
        ours, keras_bn = FusedBatchNormalization(**kwargs), keras.layers.BatchNormalization()
        ours.build(shape)
        keras_bn.build(shape)
    rng = np.random.default_rng(0)
    weights = [w + rng.uniform(0.1, 0.5, w.shape).astype("float32") for w in ours.get_weights()]
    ours.set_weights(weights)
    keras_bn.set_weights(weights)
    return ours, keras_bn


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("shape", [(64, 40), (16, 7, 7, 8)])
def test_fused_batch_norm_matches_keras(tf, policy, shape):
    ours, keras_bn = _pair(tf, shape, policy)
    x = tf.random.normal(shape, 3.0, 2.0, seed=1)
    weights = tf.random.normal(shape, seed=2)  # a loss that weighs every element differently
    outputs, grads = [], []
    for layer in (ours, keras_bn):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
        outputs.append(tf.cast(y, tf.float32).numpy())
        grads.append([g.numpy() for g in tape.gradient(loss, [x, *layer.trainable_variables])])
    assert outputs[0].dtype == outputs[1].dtype
    tol = 1e-5 if policy == "float32" else 2e-2
    np.testing.assert_allclose(outputs[0], outputs[1], atol=tol * 10)
    for ours_grad, keras_grad in zip(*grads, strict=True):
        scale = np.abs(keras_grad).max()
        np.testing.assert_allclose(ours_grad / scale, keras_grad / scale, atol=tol)
    # moving statistics: same update (Keras averages the biased variance)
    for a, b in zip(ours.get_weights(), keras_bn.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    inference = [tf.cast(layer(x, training=False), tf.float32) for layer in (ours, keras_bn)]
    np.testing.assert_allclose(inference[0], inference[1], atol=tol * 10)


def test_fused_batch_norm_runs_the_fused_kernel(tf):
    import keras

    x = tf.zeros((4, 5, 5, 3))
    assert "FusedBatchNormV3" in _op_types(tf, FusedBatchNormalization(), x)
    assert "FusedBatchNormV3" in _op_types(tf, FusedBatchNormalization(), x, training=False)
    assert "FusedBatchNormV3" not in _op_types(tf, keras.layers.BatchNormalization(), x)


def test_fused_batch_norm_falls_back_where_the_kernel_does_not_apply(tf):
    x = tf.zeros((4, 5, 5, 3))
    for layer in (
        FusedBatchNormalization(synchronized=True),  # statistics across replicas
        FusedBatchNormalization(axis=1),
        FusedBatchNormalization(center=False),
    ):
        assert "FusedBatchNormV3" not in _op_types(tf, layer, x)
    assert "FusedBatchNormV3" not in _op_types(tf, FusedBatchNormalization(), tf.zeros((2, 3, 4)))


def test_fused_batch_norm_checkpoints_like_keras(tf):
    ours, keras_bn = _pair(tf, (8, 6), "float32")
    assert [(v.path.split("/")[-1], v.shape) for v in ours.weights] == [
        (v.path.split("/")[-1], v.shape) for v in keras_bn.weights
    ]
    assert FusedBatchNormalization.from_config(ours.get_config()).momentum == ours.momentum


def test_half_word_dropout_drops_at_the_rate_and_rescales(tf):
    layer = HalfWordDropout(0.3, seed=1)
    x = tf.ones((100, 1001))  # an odd number of elements: the last word is half used
    y = layer(x, training=True).numpy()
    kept = y[y != 0]
    p = round(0.3 * 65536) / 65536
    assert abs(kept.size / y.size - (1 - p)) < 0.005
    np.testing.assert_allclose(kept, 1 / (1 - p), rtol=1e-6)
    assert layer(x, training=False) is x
    # 16 bits from each half of a word: both halves vary (a mask per element, not per pair)
    first, second = y.reshape(-1)[:50050], y.reshape(-1)[50050:]
    assert 0.6 < (first != 0).mean() < 0.8 and 0.6 < (second != 0).mean() < 0.8


def test_half_word_dropout_masks_follow_the_seed_generator(tf):
    x = tf.ones((64, 33))
    a, b = HalfWordDropout(0.5, seed=7), HalfWordDropout(0.5, seed=7)
    first = a(x, training=True).numpy()
    np.testing.assert_array_equal(first, b(x, training=True).numpy())  # same seed, same mask
    assert not np.array_equal(first, a(x, training=True).numpy())  # the next call differs
    assert len(a.non_trainable_variables) == 1  # the generator's state, checkpointed
    bf16 = HalfWordDropout(0.5, seed=7, dtype="bfloat16")(tf.cast(x, tf.bfloat16), training=True)
    assert bf16.dtype == tf.bfloat16
    np.testing.assert_array_equal(tf.cast(bf16, tf.float32).numpy(), first)


def test_half_word_dropout_compiles_with_xla(tf):
    layer = HalfWordDropout(0.3, seed=1)
    y = tf.function(lambda x: layer(x, training=True), jit_compile=True)(tf.ones((8, 9)))
    assert 0 < np.count_nonzero(y.numpy()) < 72


def test_our_models_use_these_layers_and_the_tutorial_baseline_does_not(tf):
    def kinds(model):
        return {type(layer).__name__ for layer in model.layers}

    from helpers.lessons.dcgan_networks import build_pair, tutorial_generator  # notebook 04's

    ours = build_pair("tutorial", (28, 28, 1))
    assert "FusedBatchNormalization" in kinds(ours[0])
    assert "HalfWordDropout" in kinds(ours[1])
    generator = tutorial_generator(100, tuned=False)  # the tutorial baseline's
    assert "BatchNormalization" in kinds(generator)
    assert "FusedBatchNormalization" not in kinds(generator)


def test_fused_batch_norm_chooses_by_feature_not_version(tf):
    """Keras releases before 3.11 have no ``renorm``: our layer reads it as off and fuses; where
    Keras has it, batch renormalization falls back to Keras's own ops."""
    import keras

    x = tf.zeros((4, 5, 5, 3))
    layer = FusedBatchNormalization()
    layer.build(x.shape)
    if hasattr(layer, "renorm"):
        object.__delattr__(layer, "renorm")  # as in Keras 3.10, which has no such attribute
    assert "FusedBatchNormV3" in _op_types(tf, layer, x)
    if "renorm" in inspect.signature(keras.layers.BatchNormalization).parameters:
        assert "FusedBatchNormV3" not in _op_types(tf, FusedBatchNormalization(renorm=True), x)


def test_half_word_dropout_without_a_seed_generator_is_keras_dropout(tf):
    layer = HalfWordDropout(0.5, seed=3)
    assert layer._keras_reason() == ""
    object.__delattr__(layer, "seed_generator")  # a Keras whose Dropout lacks one
    assert layer._keras_reason() == "this Keras's Dropout has no seed generator"


def test_describe_says_which_path_ran(tf, monkeypatch):
    monkeypatch.setattr(dcgan, "USED", {"batch norm": set(), "dropout": set()})
    assert dcgan.describe() == "batch norm: not run yet; dropout: not run yet"
    x = tf.zeros((4, 5, 5, 3))
    FusedBatchNormalization()(x, training=True)
    FusedBatchNormalization(synchronized=True)(x, training=True)
    HalfWordDropout(0.3, seed=1)(x, training=True)
    assert dcgan.describe() == (
        f"batch norm: {dcgan.KERAS_OWN} (synchronized statistics) and TensorFlow's fused kernel "
        "(FusedBatchNormV3); dropout: 16 random bits per element"
    )
