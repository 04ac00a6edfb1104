"""The model's local response normalisation against the tutorial's op."""

import numpy as np
import tensorflow as tf

import cifar10

# bfloat16 keeps 8 significant bits: a relative rounding of 2 ** -8.
BFLOAT16_RELATIVE = 2.0**-8
# float32 keeps 24: a relative rounding of 2 ** -24.
FLOAT32_RELATIVE = 2.0**-24


def _lrn_and_gradient(lrn, x, upstream):
    """Runs lrn(x) and the gradient of sum(lrn(x) * upstream) w.r.t. x."""
    with tf.Graph().as_default():
        inputs = tf.constant(x)
        outputs = lrn(inputs)
        [gradient] = tf.gradients(outputs, inputs, tf.cast(upstream, x.dtype))
        with tf.compat.v1.Session() as sess:
            values = sess.run([outputs, gradient])
    return [np.asarray(each, np.float32) for each in values]


def _tutorial_lrn(x):
    """The tutorial's norm1 and norm2, with its own numbers (not the
    model's constants, which this pins)."""
    return tf.nn.local_response_normalization(
        tf.cast(x, tf.float32),
        depth_radius=4,
        bias=1.0,
        alpha=0.001 / 9.0,
        beta=0.75,
    )


def test_bfloat16_lrn_and_its_gradient_equal_the_tutorials_op_to_rounding():
    rng = np.random.default_rng(6)
    # Large activations, so that the normalisation scales them by 0.6 to 1.
    x = np.maximum(rng.normal(0, 20, (4, 6, 6, 64)), 0).astype(np.float32)
    upstream = rng.normal(0, 1, x.shape).astype(np.float32)
    x = x.astype(tf.bfloat16.as_numpy_dtype)
    outputs, gradient = _lrn_and_gradient(
        lambda each: cifar10._lrn(each, "norm"), x, upstream
    )
    expected, expected_gradient = _lrn_and_gradient(
        _tutorial_lrn, x.astype(np.float32), upstream
    )
    scale = expected / np.maximum(x.astype(np.float32), 1e-6)
    assert 0.5 < scale[x.astype(np.float32) > 1].min() < 0.9
    assert (
        np.abs(outputs - expected).max()
        < 2 * BFLOAT16_RELATIVE * np.abs(expected).max()
    )
    assert np.abs(gradient - expected_gradient).max() < (
        4 * BFLOAT16_RELATIVE * np.abs(expected_gradient).max()
    )


def test_float32_lrn_and_its_gradient_equal_the_tutorials_op_to_float32_rounding():
    rng = np.random.default_rng(7)
    x = np.maximum(rng.normal(0, 20, (4, 6, 6, 64)), 0).astype(np.float32)
    upstream = rng.normal(0, 1, x.shape).astype(np.float32)
    outputs, gradient = _lrn_and_gradient(
        lambda each: cifar10._lrn(each, "norm"), x, upstream
    )
    expected, expected_gradient = _lrn_and_gradient(_tutorial_lrn, x, upstream)
    assert 0.5 < (expected / np.maximum(x, 1e-6))[x > 1].min() < 0.9
    # Measured: 3.7 and 3.4 roundings of the largest value; other sums'
    # orders (oneDNN's on another CPU) may round a few more times.
    assert np.abs(outputs - expected).max() <= (
        16 * FLOAT32_RELATIVE * np.abs(expected).max()
    )
    assert np.abs(gradient - expected_gradient).max() < (
        16 * FLOAT32_RELATIVE * np.abs(expected_gradient).max()
    )
