"""The MNIST convolutional model of the multi-GPU tutorial.

Every variable is created by the tutorial's variable helpers; the towers
place them, so that they share one copy.
"""

import tensorflow as tf

import mnist_input
from multigpu.distributed import cluster
from multigpu.graph import (
    placement,
    step_optimizer,
    summaries,
    towers,
    variable_update,
    variables,
)
from multigpu.train_dir import checkpoints, restore

HEIGHT, WIDTH, DEPTH = mnist_input.HEIGHT, mnist_input.WIDTH, mnist_input.DEPTH
NUM_CLASSES = mnist_input.NUM_CLASSES

# Layer sizes and initialisation of the reference model.
CONV1_FILTERS, CONV2_FILTERS = 32, 64  # 5x5 kernels, stride 1
CONV_STDDEV = 5e-2
LOCAL3_UNITS = 1024
LOCAL_STDDEV = 0.04  # local3 and local4
LOCAL_WEIGHT_DECAY = 0.004  # local3 and local4
SOFTMAX_STDDEV = 1.0 / 192  # the reference kept CIFAR-10's 1 / local4 width

# Momentum of the optimizer (with Nesterov's update).
MOMENTUM = 0.9


def _conv_relu(images, kernel_shape, bias_init):
    """5x5 convolution, stride 1, and a ReLU, in the current variable scope:
    float32 [batch, h, w, in_depth] -> [batch, h, w, out_depth], for
    kernel_shape [5, 5, in_depth, out_depth]."""
    kernel = variables.variable_with_weight_decay(
        "weights", kernel_shape, stddev=CONV_STDDEV, wd=None
    )
    biases = variables.variable_on_cpu(
        "biases", kernel_shape[-1:], tf.constant_initializer(bias_init)
    )
    conv = tf.nn.conv2d(images, kernel, [1, 1, 1, 1], padding="SAME")
    return tf.nn.relu(tf.nn.bias_add(conv, biases))


def _max_pool(x, name):
    """2x2 max-pooling, stride 2: [batch, h, w, c] -> [batch, h/2, w/2, c]."""
    return tf.nn.max_pool2d(
        x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME", name=name
    )


def inference(images):
    """Builds the MNIST network: conv1 -> pool1 -> conv2 -> pool2 -> local3
    -> local4 -> softmax_linear, a ReLU after every layer but the last.

    images: float32 [batch, 784], the pixels row by row, in [-0.5, 0.5].
    Returns logits: float32 [batch, 10], unnormalised.
    """
    # [batch, 784] -> [batch, 28, 28, 1]: the images, one channel.
    x = tf.reshape(images, [-1, HEIGHT, WIDTH, DEPTH])
    with tf.compat.v1.variable_scope("conv1"):
        conv1 = _conv_relu(x, [5, 5, DEPTH, CONV1_FILTERS], 0.0)
    pool1 = _max_pool(conv1, "pool1")  # [batch, 14, 14, 32]
    with tf.compat.v1.variable_scope("conv2"):
        conv2 = _conv_relu(pool1, [5, 5, CONV1_FILTERS, CONV2_FILTERS], 0.1)
    pool2 = _max_pool(conv2, "pool2")  # [batch, 7, 7, 64]
    with tf.compat.v1.variable_scope("local3"):
        # [batch, 7, 7, 64] -> [batch, 3136]: one vector per image.
        flat = tf.reshape(pool2, [-1, 7 * 7 * CONV2_FILTERS])
        local3 = tf.nn.relu(
            variables.fully_connected(
                flat, LOCAL3_UNITS, LOCAL_STDDEV, LOCAL_WEIGHT_DECAY, 0.1
            )
        )
    with tf.compat.v1.variable_scope("local4"):
        local4 = tf.nn.relu(
            variables.fully_connected(
                local3, NUM_CLASSES, LOCAL_STDDEV, LOCAL_WEIGHT_DECAY, 0.1
            )
        )
    with tf.compat.v1.variable_scope("softmax_linear"):
        return variables.fully_connected(
            local4, NUM_CLASSES, SOFTMAX_STDDEV, None, 0.0
        )


def loss(logits, labels):
    """Adds the mean cross-entropy of a batch to the `losses` collection,
    which holds the weight decay of local3 and local4 already.

    logits: float32 [batch, 10]; labels: int32 [batch] in 0..9.
    Returns total_loss: float32 scalar, the sum of the collection.
    """
    towers.add_cross_entropy(logits, labels)
    return tf.add_n(tf.compat.v1.get_collection("losses"), name="total_loss")


def optimizer(learning_rate):
    """Momentum 0.9 with Nesterov's update, as in the reference."""
    return tf.compat.v1.train.MomentumOptimizer(
        learning_rate, MOMENTUM, use_nesterov=True
    )


def train(
    next_batch, devices, learning_rate, task=cluster.LOCAL_TASK, update=None
):
    """Builds one training step of the towers on devices (strs), each tower
    on its own batch; the global step is incremented once.

    next_batch: callable() -> (float32 [batch, 784], int32 [batch]), called
    once per tower, on the CPU. update: the `variable_update.VariableUpdate`
    (None: parameter_server on the CPU).

    Returns:
      loss: float32 scalar, the mean of the towers' total losses.
      train_op: the op of one training step.
      summary_op: string scalar, the loss summaries of the last tower.
      hooks: the session hooks the optimizer needs.
    """
    tf.compat.v1.train.get_or_create_global_step()
    steps = step_optimizer.Steps(
        None, task.replicas_to_aggregate, task.num_workers, None
    )
    step = task.kind.step_optimizer(optimizer(learning_rate), steps)
    opt = step.optimizer
    update = update or variable_update.parameter_server(devices)
    plan = variable_update.tower_plan(update)
    tower_losses, tower_grads = [], []
    for tower in plan:
        with towers.tower(tower) as scope:
            # The input stays on the CPU; the tower's device only computes.
            with tf.device("/cpu:0"):
                images, labels = next_batch()
            towers.add_cross_entropy(inference(images), labels)
            tower_losses.append(_tower_loss_with_summaries(scope))
            tower_grads.append(
                variable_update.tower_gradients(opt, tower_losses[-1], tower)
            )
    # Synchronisation point: every tower's gradients, averaged on the CPU
    # or all-reduced onto every tower's copy.
    with tf.name_scope("reduce"):
        reduced = variable_update.reduce_gradients(update, tower_grads)
    with tf.name_scope("update"):
        train_op = variable_update.apply_gradients(
            update,
            plan,
            opt,
            reduced,
            variable_update.Statistics([], tf.constant(True)),
        )
    mean_loss = tf.reduce_mean(tf.stack(tower_losses), name="mean_tower_loss")
    summary_op = summaries.last_tower_summaries(scope)
    hooks = cluster.sync_hooks(step.sync, task)
    return mean_loss, train_op, summary_op, hooks


def _tower_loss_with_summaries(scope):
    """The tower's total loss, its terms summarised."""
    total_loss = towers.tower_total_loss(scope)
    for each in tf.compat.v1.get_collection("losses", scope):
        summaries.scalar_summary(summaries.loss_tag(each.op.name), each)
    summaries.scalar_summary(summaries.loss_tag("total_loss"), total_loss)
    return total_loss


def evaluation(logits, labels):
    """int32 scalar, the number of examples whose highest logit (float32
    [batch, 10]) is their label (int32 [batch])."""
    correct = tf.nn.in_top_k(predictions=logits, targets=labels, k=1)
    return tf.reduce_sum(tf.cast(correct, tf.int32))


def evaluate(checkpoint_dir, data_dir, batch_size):
    """Scores the newest checkpoint on every example of the test split.

    Returns (accuracy: float, num_examples: int, global_step: int); a
    ValueError when there is no checkpoint or a bad test file.
    """
    checkpoint = checkpoints.latest_checkpoint(checkpoint_dir)
    if checkpoint is None:
        raise ValueError("no checkpoint in %s to evaluate" % checkpoint_dir)
    filename = mnist_input.data_file(data_dir, "test")
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            batches = mnist_input.dataset(
                data_dir, "test", batch_size, num_epochs=1, training=False
            )
            images, labels = tf.compat.v1.data.make_one_shot_iterator(
                batches
            ).get_next()
        hits = evaluation(inference(images), labels)
        global_step = tf.compat.v1.train.get_or_create_global_step()
        saver = restore.Restorer(
            {v.op.name: v for v in tf.compat.v1.global_variables()}
        )
        with tf.compat.v1.Session(config=placement.session_config()) as sess:
            saver.restore(sess, checkpoint)
            total_hits, num_examples = 0, 0
            with mnist_input.reading(filename):
                try:
                    while True:
                        batch_hits, batch_labels = sess.run([hits, labels])
                        total_hits += batch_hits
                        num_examples += len(batch_labels)
                except tf.errors.OutOfRangeError:
                    pass
            step = sess.run(global_step)
    return float(total_hits / num_examples), num_examples, int(step)
