"""The CIFAR-10 tutorial model: logits, parameters, loss, schedule."""

import numpy as np
import pytest
import tensorflow as tf

import cifar10

LABELS = [0, 3, 9, 1, 4]


@pytest.fixture(scope="module")
def model():
    """Builds the model on 5 random images; returns the evaluated results.

    Returns:
      dict with the static 'logits_shape', the 'parameters' count, and the
      values of 'logits', 'total_loss', 'cross_entropy' and every variable
      by name.
    """
    images = np.random.default_rng(3).normal(size=(5, 24, 24, 3))
    with tf.Graph().as_default() as graph:
        logits = cifar10.inference(tf.constant(images, tf.float32))
        total_loss = cifar10.loss(logits, tf.constant(LABELS))
        variables = tf.compat.v1.trainable_variables()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = sess.run(
                {
                    "logits": logits,
                    "total_loss": total_loss,
                    "cross_entropy": graph.get_tensor_by_name(
                        "cross_entropy:0"
                    ),
                    **{var.op.name: var for var in variables},
                }
            )
    values["logits_shape"] = logits.shape.as_list()
    values["parameters"] = sum(var.shape.num_elements() for var in variables)
    return values


def test_inference_gives_10_float32_logits_per_image(model):
    assert model["logits_shape"] == [5, 10]
    assert model["logits"].shape == (5, 10)
    assert model["logits"].dtype == np.float32


def test_the_network_has_the_parameter_count_of_the_tutorial(model):
    conv1 = 5 * 5 * 3 * 64 + 64
    conv2 = 5 * 5 * 64 * 64 + 64
    local3 = 2304 * 384 + 384  # 6x6x64 after pool2.
    local4 = 384 * 192 + 192
    softmax_linear = 192 * 10 + 10
    # 1,068,298 in all.
    assert model["parameters"] == (
        conv1 + conv2 + local3 + local4 + softmax_linear
    )


def test_cross_entropy_is_the_batch_mean_of_the_softmax_loss(model):
    logits = model["logits"].astype(np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(5), LABELS].mean()
    assert model["cross_entropy"] == pytest.approx(expected, rel=1e-5)


def test_total_loss_adds_the_weight_decay_of_local3_and_local4(model):
    def l2(name):
        return 0.5 * np.sum(model[name].astype(np.float64) ** 2)

    weight_decay = 0.004 * (l2("local3/weights") + l2("local4/weights"))
    # About 2.4 at initialisation: the stddev 0.04 weights of local3 and 4.
    assert weight_decay > 2.0
    assert model["total_loss"] - model["cross_entropy"] == pytest.approx(
        weight_decay, rel=1e-5
    )


@pytest.mark.parametrize(
    "step, rate",
    [(0, 0.1), (136717, 0.1), (136718, 0.01), (2 * 136718, 0.001)],
)
def test_learning_rate_drops_tenfold_every_350_epochs(step, rate):
    # 350 epochs of 50,000 examples at 128 per step: 136,718 steps.
    with tf.Graph().as_default():
        global_step = tf.constant(step, tf.int64)
        learning_rate = cifar10.learning_rate(global_step, 128)
        with tf.compat.v1.Session() as sess:
            assert sess.run(learning_rate) == pytest.approx(rate, rel=1e-6)


def test_a_clipped_step_moves_the_weights_by_the_learning_rate_times_the_norm():
    # At step 0 the rate is 0.1; a norm of 0.001 is far below the gradients'
    # own, so the clipped step's global norm is exactly 0.1 * 0.001.
    images = np.random.default_rng(4).normal(size=(5, 24, 24, 3))
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        total_loss = cifar10.loss(
            cifar10.inference(tf.constant(images, tf.float32)),
            tf.constant(LABELS),
        )
        train_op = cifar10.train(
            total_loss, global_step, batch_size=5, clip_norm=0.001
        )
        variables = tf.compat.v1.trainable_variables()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            before = sess.run(variables)
            sess.run(train_op)
            after = sess.run(variables)
    moved = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(after, before)))
    assert moved == pytest.approx(0.1 * 0.001, rel=1e-3)
