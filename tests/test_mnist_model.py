"""mnist_model: the network, its loss, the optimizer and the tower step."""

import numpy as np
import pytest
import tensorflow as tf

import mnist_model
from multigpu.graph import placement

LEARNING_RATE = 0.02
PER_TOWER_BATCH = 4


def random_batch(num_examples, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.uniform(-0.5, 0.5, (num_examples, 784)).astype(np.float32)
    labels = rng.integers(0, 10, num_examples).astype(np.int32)
    return images, labels


def test_inference_builds_the_reference_layers_on_the_cpu():
    with tf.Graph().as_default() as graph:
        logits = mnist_model.inference(tf.zeros([3, 784]))
        shapes = {
            v.op.name: v.shape.as_list()
            for v in tf.compat.v1.trainable_variables()
        }
        devices = {v.device for v in tf.compat.v1.trainable_variables()}
        pool_shapes = [
            graph.get_tensor_by_name(name + ":0").shape.as_list()
            for name in ("pool1", "pool2")
        ]
    assert logits.dtype == tf.float32 and logits.shape.as_list() == [3, 10]
    assert shapes == {
        "conv1/weights": [5, 5, 1, 32],
        "conv1/biases": [32],
        "conv2/weights": [5, 5, 32, 64],
        "conv2/biases": [64],
        "local3/weights": [7 * 7 * 64, 1024],
        "local3/biases": [1024],
        "local4/weights": [1024, 10],
        "local4/biases": [10],
        "softmax_linear/weights": [10, 10],
        "softmax_linear/biases": [10],
    }
    assert devices == {"/device:CPU:0"}
    assert pool_shapes == [[3, 14, 14, 32], [3, 7, 7, 64]]


def test_loss_is_cross_entropy_plus_weight_decay_of_local3_and_local4():
    images, labels = random_batch(6)
    with tf.Graph().as_default():
        logits = mnist_model.inference(tf.constant(images))
        total_loss = mnist_model.loss(logits, tf.constant(labels))
        names = [each.op.name for each in tf.compat.v1.get_collection("losses")]
        variables = {v.op.name: v for v in tf.compat.v1.trainable_variables()}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            logits_value, loss_value, local3, local4 = sess.run(
                [
                    logits,
                    total_loss,
                    variables["local3/weights"],
                    variables["local4/weights"],
                ]
            )
    shifted = logits_value - logits_value.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    cross_entropy = -log_softmax[np.arange(6), labels].mean()
    weight_decay = 0.004 * ((local3**2).sum() + (local4**2).sum()) / 2
    assert names == [
        "local3/weight_loss",
        "local4/weight_loss",
        "cross_entropy",
    ]
    assert loss_value == pytest.approx(cross_entropy + weight_decay, rel=1e-5)


def test_optimizer_takes_a_nesterov_momentum_step():
    with tf.Graph().as_default():
        var = tf.compat.v1.get_variable("var", initializer=1.0)
        opt = mnist_model.optimizer(0.1)
        # The gradient of 3 * var is 3.
        train_op = opt.minimize(3.0 * var)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train_op)
            first = sess.run(var)
            sess.run(train_op)
            second = sess.run(var)
    # Nesterov: accumulation = 0.9 * accumulation + g, then
    # var -= lr * (g + 0.9 * accumulation): 0.1 * 3 * 1.9, then 0.1 * 3 * 2.71.
    assert first == pytest.approx(1.0 - 0.57)
    assert second == pytest.approx(1.0 - 0.57 - 0.813)


def test_evaluation_counts_the_top_logit_hits():
    logits = np.eye(10, dtype=np.float32)[[3, 1, 4, 1, 5]]
    with tf.Graph().as_default():
        hits = mnist_model.evaluation(
            tf.constant(logits), tf.constant([3, 1, 4, 0, 0], tf.int32)
        )
        with tf.compat.v1.Session() as sess:
            assert sess.run(hits) == 3


def one_training_step(images, labels, num_towers, initial_values):
    """Runs one step of `num_towers` towers on virtual CPU devices.

    The towers share one input of batches of len(images) / num_towers
    examples, so together they take every example once.

    Args:
      images: float32 [n, 784].
      labels: int32 [n].
      num_towers: int.
      initial_values: dict of variable name to array, loaded before the
        step; None keeps the initialisers' values.

    Returns:
      loss: float, the step's mean tower loss.
      before: dict of variable name to value before the step.
      after: dict of variable name to value after the step.
    """
    devices = ["/cpu:%d" % i for i in range(num_towers)]
    with tf.Graph().as_default():
        batches = tf.data.Dataset.from_tensor_slices((images, labels)).batch(
            len(images) // num_towers
        )
        iterator = tf.compat.v1.data.make_one_shot_iterator(batches)
        loss, train_op, _, _ = mnist_model.train(
            iterator.get_next, devices, LEARNING_RATE
        )
        variables = tf.compat.v1.trainable_variables()
        with tf.compat.v1.Session(
            config=placement.session_config(devices)
        ) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            if initial_values is not None:
                for var in variables:
                    var.load(initial_values[var.op.name], sess)
            by_name = {v.op.name: v for v in variables}
            before = sess.run(by_name)
            loss_value, _ = sess.run([loss, train_op])
            after = sess.run(by_name)
    return float(loss_value), before, after


@pytest.mark.parametrize("num_towers", [2, 4])
def test_n_towers_take_the_same_step_as_one_tower_with_n_times_the_batch(
    num_towers,
):
    images, labels = random_batch(num_towers * PER_TOWER_BATCH)
    one_loss, initial, one_after = one_training_step(images, labels, 1, None)
    loss, before, after = one_training_step(images, labels, num_towers, initial)
    assert before.keys() == initial.keys()
    for name in initial:
        np.testing.assert_array_equal(before[name], initial[name])
    max_difference = max(
        np.abs(after[name] - one_after[name]).max() for name in after
    )
    largest_update = max(
        np.abs(one_after[name] - initial[name]).max() for name in after
    )
    print(
        "%d towers: max abs difference %.3g in the variables, %.3g in the "
        "loss" % (num_towers, max_difference, abs(loss - one_loss))
    )
    assert largest_update > 1e-3  # the step moved the variables
    assert max_difference < 1e-6, max_difference
    assert loss == pytest.approx(one_loss, rel=1e-6, abs=0)
