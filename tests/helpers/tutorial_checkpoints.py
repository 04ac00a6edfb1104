"""Checkpoints written in-process: the tutorial's own, and one of infinities."""

import os

import numpy as np
import tensorflow as tf

import cifar10
from data_sets import cifar10_batches
from multigpu.train_dir import restore

# The batch of the trainer's graph that write_infinite_checkpoint saves.
BATCH_SIZE = 32


# The weights of the tutorial's model, as its graph names them.
TUTORIAL_WEIGHTS = {
    "conv1/weights": [5, 5, 3, 64],
    "conv1/biases": [64],
    "conv2/weights": [5, 5, 64, 64],
    "conv2/biases": [64],
    "local3/weights": [2304, 384],
    "local3/biases": [384],
    "local4/weights": [384, 192],
    "local4/biases": [192],
    "softmax_linear/weights": [192, 10],
    "softmax_linear/biases": [10],
}


# The losses the tutorial's one-device trainer averages (0.9, named 'avg'):
# the cross-entropy, a weight-decay term per layer (zero for conv1, conv2
# and softmax_linear) and their total.
TUTORIAL_LOSSES = [
    "cross_entropy",
    "conv1/weight_loss",
    "conv2/weight_loss",
    "local3/weight_loss",
    "local4/weight_loss",
    "softmax_linear/weight_loss",
    "total_loss",
]


# Every variable of a checkpoint of the tutorial's one-device trainer.
TUTORIAL_ONE_DEVICE_NAMES = (
    set(TUTORIAL_WEIGHTS)
    | {name + restore.SHADOW_SUFFIX for name in TUTORIAL_WEIGHTS}
    | {name + "/avg" for name in TUTORIAL_LOSSES}
    | {"global_step"}
)


# The steps of the tutorial checkpoint built by the test.
TUTORIAL_STEP = 4


def saved_values(checkpoint):
    """dict name -> numpy value of every variable of the checkpoint."""
    reader = tf.train.load_checkpoint(str(checkpoint))
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
    }


def build_tutorial_one_device_variables():
    """The variables of the tutorial's one-device trainer, in the graph."""
    weights = [
        tf.compat.v1.get_variable(name, shape)
        for name, shape in TUTORIAL_WEIGHTS.items()
    ]
    tf.compat.v1.train.get_or_create_global_step()
    tf.compat.v1.train.ExponentialMovingAverage(
        cifar10.MOVING_AVERAGE_DECAY
    ).apply(weights)
    losses = [tf.constant(1.0, name=name) for name in TUTORIAL_LOSSES]
    tf.compat.v1.train.ExponentialMovingAverage(0.9, name="avg").apply(losses)


def restore_in_tutorial_graph(checkpoint):
    """Restores the checkpoint into the tutorial's one-device variables."""
    with tf.Graph().as_default():
        build_tutorial_one_device_variables()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            # Restores every variable or fails.
            saver.restore(sess, checkpoint)
            step = sess.run(tf.compat.v1.train.get_global_step())
    assert step == int(checkpoint.rsplit("-", 1)[1])


def write_tutorial_multi_gpu_checkpoint(train_dir, num_classes=10):
    """Writes what the tutorial's multi-GPU trainer saves, at TUTORIAL_STEP.

    Its weights and their moving averages, a float32 global_step, no loss
    averages. Returns the checkpoint's values.
    """
    rng = np.random.default_rng(0)
    shapes = dict(TUTORIAL_WEIGHTS)
    shapes["softmax_linear/weights"] = [192, num_classes]
    shapes["softmax_linear/biases"] = [num_classes]
    with tf.Graph().as_default():
        weights = [
            tf.compat.v1.get_variable(
                name,
                initializer=rng.normal(0, 0.01, shape).astype(np.float32),
            )
            for name, shape in shapes.items()
        ]
        tf.compat.v1.get_variable(
            "global_step",
            [],
            initializer=tf.constant_initializer(TUTORIAL_STEP),
            trainable=False,
        )
        update = tf.compat.v1.train.ExponentialMovingAverage(
            cifar10.MOVING_AVERAGE_DECAY
        ).apply(weights)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(update)
            tf.compat.v1.train.Saver().save(
                sess, str(train_dir / "model.ckpt"), global_step=TUTORIAL_STEP
            )
    values = saved_values(tf.train.latest_checkpoint(str(train_dir)))
    assert values["global_step"].dtype == np.float32
    return values


def write_infinite_checkpoint(train_dir, step):
    """Saves the trainer's variables at `step`, every weight infinite.

    Returns:
      str, the checkpoint path.
    """
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        images = tf.zeros([BATCH_SIZE, 24, 24, 3])
        labels = tf.zeros([BATCH_SIZE], tf.int32)
        total_loss = cifar10.loss(cifar10.inference(images), labels)
        cifar10.train(total_loss, global_step, batch_size=BATCH_SIZE)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for var in tf.compat.v1.trainable_variables():
                var.load(np.full(var.shape, np.inf, np.float32), sess)
            global_step.load(step, sess)
            return tf.compat.v1.train.Saver().save(
                sess, os.path.join(str(train_dir), "model.ckpt"), step
            )


def top_1_hits(data_dir, train_dir, num_examples):
    """Top-1 hits of the newest checkpoint's moving averages, by our eval."""
    with tf.Graph().as_default():
        images, labels, init_op = cifar10_batches.eval_inputs(
            "test", str(data_dir), num_examples, num_examples
        )
        logits = cifar10.inference(images)
        top_1 = tf.nn.in_top_k(predictions=logits, targets=labels, k=1)
        saver = tf.compat.v1.train.Saver(cifar10.variables_to_restore())
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(str(train_dir)))
            sess.run(init_op)
            return int(np.sum(sess.run(top_1)))
