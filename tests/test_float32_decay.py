"""Weight decay in reduced precision acts on the float32 variables."""

import numpy as np
import pytest
import tensorflow as tf
import tf_slim as slim

from multigpu.graph import any_model, towers

# Keras' l2(SCALE) is SCALE * sum(w**2); slim's l2_regularizer(SCALE) is
# SCALE * sum(w**2) / 2 (tf.nn.l2_loss).
SCALE = 0.01


def layers_model(images, is_training):
    """tf.compat.v1.layers with kernel_regularizer: [batch, 8, 8, 3] -> 10."""
    l2 = tf.keras.regularizers.l2(SCALE)
    x = tf.compat.v1.layers.conv2d(
        images, 8, 3, kernel_regularizer=l2, name="conv"
    )
    x = tf.reduce_mean(x, [1, 2])
    return tf.compat.v1.layers.dense(x, 10, kernel_regularizer=l2, name="fc")


def slim_model(images, is_training):
    """tf-slim's layers with weights_regularizer: [batch, 8, 8, 3] -> 10."""
    l2 = slim.l2_regularizer(SCALE)
    x = slim.conv2d(images, 8, [3, 3], weights_regularizer=l2, scope="conv")
    x = tf.reduce_mean(x, [1, 2])
    return slim.fully_connected(x, 10, weights_regularizer=l2, scope="fc")


def get_variable_model(images, is_training):
    """get_variable's regularizer=: [batch, 8, 8, 3] -> 10."""
    kernel = tf.compat.v1.get_variable(
        "kernel",
        [3, 3, 3, 10],
        dtype=images.dtype,
        regularizer=slim.l2_regularizer(SCALE),
    )
    return tf.reduce_mean(tf.nn.conv2d(images, kernel, 1, "SAME"), [1, 2])


def decay_and_float32_reference(model_fn, compute_dtype, halved):
    """The towers' regularization loss and its float64 sum of the kernels.

    Returns:
      (float32 loss, float64 reference, dtypes of the terms).
    """
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(7)
        images = tf.zeros([2, 8, 8, 3])
        any_model.call_model(model_fn, images, True, 10, compute_dtype)
        terms = towers.regularization_losses("")
        raw = tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES
        )
        kernels = [
            var
            for var in tf.compat.v1.trainable_variables()
            if var.shape.ndims > 1
        ]
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            loss, values = sess.run([tf.add_n(terms), kernels])
    squares = sum(np.sum(value.astype(np.float64) ** 2) for value in values)
    reference = SCALE * squares * (0.5 if halved else 1.0)
    return loss, reference, sorted({each.dtype.name for each in raw})


@pytest.mark.parametrize("compute_dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize(
    "model_fn, halved",
    [(layers_model, False), (slim_model, True), (get_variable_model, True)],
    ids=["tf.compat.v1.layers", "tf-slim", "get_variable"],
)
def test_weight_decay_in_reduced_precision_is_the_float32_computation(
    model_fn, halved, compute_dtype
):
    # Taken of the bfloat16 cast, tf.compat.v1.layers' decay was 0.13867
    # for a float32 0.13863: 3e-4 off, 300 times float32's precision.
    loss, reference, dtypes = decay_and_float32_reference(
        model_fn, compute_dtype, halved
    )
    assert dtypes == ["float32"]
    np.testing.assert_allclose(loss, reference, rtol=1e-6)


def test_the_tf1_layers_are_as_before_once_the_model_is_built():
    # tf-keras' and TensorFlow's own TF1 layers (tf-slim's).
    classes = any_model._tf1_layer_classes()
    hook = "_handle_weight_regularization"
    with any_model.layers_regularize_float32({}):
        assert [hook in each.__dict__ for each in classes] == [True, True]
    assert [hook in each.__dict__ for each in classes] == [False, False]
