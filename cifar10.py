"""The CIFAR-10 tutorial model: inference, loss and the training op.

The public surface is the 2017 tutorial's (its flags, constants and calls),
so that scripts written against it run here; the no-argument calls read
the flags (absl's, or `parser`'s of the argparse era), our scripts pass
plain arguments.
"""

import functools
import os

import tensorflow as tf
from absl import flags

import cifar10_input
from data_sets import cifar10_data
from multigpu.flags import script
from multigpu.graph import step_optimizer, summaries, towers, variables

# The tutorial's three flags, defined here as the tutorial did: scripts
# written against it read FLAGS.batch_size after importing cifar10.
FLAGS = flags.FLAGS
flags.DEFINE_integer(
    "batch_size",
    128,
    "Examples per batch; per tower in a multi-GPU trainer, where a step "
    "trains on batch_size * num_gpus examples.",
    lower_bound=1,
)
flags.DEFINE_string(
    "data_dir",
    "/tmp/cifar10_data",
    "Folder that holds (or receives) cifar-10-batches-bin/.",
)
flags.DEFINE_boolean(
    "use_fp16",
    False,
    "Compute in reduced precision, the variables staying float32: float16 "
    "on GPUs and bfloat16 on CPUs in our scripts, float16 in the tutorial's "
    "calls.",
)

# The same three flags for scripts of the argparse era (Sept. 2017 to Jan.
# 2018), which call `cifar10.parser.parse_args()`.
parser = script.RememberingParser()
for _name, _parsing in (
    ("batch_size", dict(type=script.positive_int)),
    ("data_dir", {}),
    ("use_fp16", dict(type=script.boolean, nargs="?", const=True)),
):
    parser.add_argument(
        "--" + _name,
        default=FLAGS[_name].default,
        help=FLAGS[_name].help,
        **_parsing,
    )
del _name, _parsing


def _flags():
    return FLAGS if parser.values is None else parser.values


IMAGE_SIZE = cifar10_input.IMAGE_SIZE
NUM_CLASSES = cifar10_input.NUM_CLASSES
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = (
    cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN
)
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_EVAL
# The tutorial's prefix of the towers' name scopes: tower_0, tower_1, ...
TOWER_NAME = towers.TOWER_NAME
# The binary archive that `maybe_download_and_extract` fetches.
DATA_URL = cifar10_input.DATA_URL

# Published training constants of the tutorial.
MOVING_AVERAGE_DECAY = 0.9999  # Decay of the variables' shadow copies.
NUM_EPOCHS_PER_DECAY = 350.0  # Epochs between learning-rate decays.
LEARNING_RATE_DECAY_FACTOR = 0.1  # Learning-rate factor at each decay.
INITIAL_LEARNING_RATE = 0.1  # Plain gradient descent.

# Local response normalisation of the tutorial (after conv1 and conv2).
LRN_DEPTH_RADIUS = 4
LRN_BIAS = 1.0
LRN_ALPHA = 0.001 / 9.0
LRN_BETA = 0.75

# Layer sizes and initialisation of the tutorial.
CONV_FILTERS = 64  # conv1 and conv2, 5x5 kernels.
CONV_STDDEV = 5e-2
LOCAL3_UNITS, LOCAL4_UNITS = 384, 192
LOCAL_STDDEV = 0.04
LOCAL_WEIGHT_DECAY = 0.004


def distorted_inputs():
    """The tutorial's training input, from queues: images float32
    [batch_size, 24, 24, 3] (float16 with --use_fp16), labels int32
    [batch_size]."""
    images, labels = cifar10_input.distorted_inputs(
        _batches_dir(), _flags().batch_size
    )
    return _input_dtype(images), labels


def inputs(eval_data):
    """The tutorial's eval input, central crops, shaped as
    `distorted_inputs`'; eval_data True reads the test file."""
    images, labels = cifar10_input.inputs(
        eval_data, _batches_dir(), _flags().batch_size
    )
    return _input_dtype(images), labels


def _batches_dir():
    """--data_dir's batches folder; says so when it holds the sample set,
    as our scripts do."""
    if not _flags().data_dir:
        raise ValueError(
            "--data_dir is empty; pass the folder that holds (or receives) "
            "%s/" % cifar10_input.BATCHES_DIR
        )
    _say_once_if_sample_set(_flags().data_dir)
    return os.path.join(_flags().data_dir, cifar10_input.BATCHES_DIR)


# Once a folder: a script may build its input more than once.
_say_once_if_sample_set = functools.lru_cache(maxsize=None)(
    cifar10_data.say_if_sample_set
)


def _input_dtype(images):
    # As in the tutorial, --use_fp16 makes float16 images, and `inference`
    # computes in its input's dtype. Labels stay int32 for `in_top_k`.
    return tf.cast(images, tf.float16) if _flags().use_fp16 else images


def maybe_download_and_extract():
    """Downloads and extracts CIFAR-10 into --data_dir unless it is there."""
    cifar10_data.maybe_download_and_extract(_flags().data_dir)


def _activation_summary(x):
    summaries.histogram_summary("activations", x)
    summaries.scalar_summary("sparsity", tf.nn.zero_fraction(x))


def _conv_relu(images, in_depth, bias_init):
    """5x5 convolution and a ReLU: images [batch, height, width, in_depth]
    -> [batch, height, width, 64], in the images' dtype."""
    kernel = variables.variable_with_weight_decay(
        "weights",
        [5, 5, in_depth, CONV_FILTERS],
        stddev=CONV_STDDEV,
        # The tutorial's zero term: it puts conv1/weight_loss (and its
        # average) in the losses and the checkpoint, as the tutorial does.
        wd=0.0,
    )
    biases = variables.variable_on_cpu(
        "biases", [CONV_FILTERS], tf.constant_initializer(bias_init)
    )
    conv = tf.nn.conv2d(
        images, tf.cast(kernel, images.dtype), [1, 1, 1, 1], padding="SAME"
    )
    return tf.nn.relu(tf.nn.bias_add(conv, tf.cast(biases, images.dtype)))


def _max_pool(x, name):
    return tf.nn.max_pool2d(
        x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME", name=name
    )


def _lrn(x, name):
    """The tutorial's local response normalisation, computed in float32: x
    [batch, height, width, depth] -> the same shape in x's dtype."""
    # Not tf.nn.local_response_normalization: its CPU gradient kernel is a
    # scalar loop (LRNGrad 14.7% of a float32 step's op time, LRN 7.5%),
    # and reduced precision has no LRN kernel on every device. The same
    # formula from a matmul over the channels and elementwise ops, with its
    # gradient in closed form, trains a float32 step 1.19 times as fast
    # (docs/speed.md).
    with tf.name_scope(name):
        return tf.cast(_lrn_float32(tf.cast(x, tf.float32)), x.dtype)


@tf.custom_gradient
def _lrn_float32(x):
    """`_lrn` of float32 x and its gradient. With denominator =
    LRN_BIAS + LRN_ALPHA * sqr_sum (sqr_sum: of x ** 2 over the channels
    within LRN_DEPTH_RADIUS) and outputs = x * denominator ** -LRN_BETA, the
    gradient of upstream g is g * denominator ** -LRN_BETA - 2 * LRN_ALPHA *
    LRN_BETA * x * (the window's sum of g * outputs / denominator): half the
    ops of the chain rule through each op.
    """
    channels = tf.range(x.shape[-1])
    window = tf.abs(channels[:, None] - channels[None, :])
    band = tf.cast(window <= LRN_DEPTH_RADIUS, tf.float32)  # [depth, depth]
    # The constant factors ride on the band: one multiplication fewer each.
    denominator = LRN_BIAS + tf.einsum(
        "nhwc,cd->nhwd", tf.square(x), LRN_ALPHA * band
    )
    # denominator ** -LRN_BETA, LRN_BETA being 3/4, as r * sqrt(r) with r
    # = rsqrt(denominator): vectorised, unlike pow, and cheaper than
    # exp(-LRN_BETA * log(.)).
    root = tf.math.rsqrt(denominator)
    scale = root * tf.sqrt(root)
    outputs = x * scale

    def gradient(upstream):
        # The band is symmetric: the window of each channel, either way.
        window_sum = tf.einsum(
            "nhwd,cd->nhwc",
            upstream * outputs / denominator,
            2 * LRN_ALPHA * LRN_BETA * band,
        )
        return upstream * scale - x * window_sum

    return outputs, gradient


def inference(images, is_training=True):
    """Builds the CIFAR-10 network: conv1 -> pool1 -> norm1 -> conv2 ->
    norm2 -> pool2 -> local3 -> local4 -> softmax_linear.

    images [batch, 24, 24, 3], standardised, float32 or the compute dtype
    (float16, bfloat16) the layers compute in -> logits float32 [batch,
    10]. Variables are float32. is_training: unused (no batch norm nor
    dropout), the second argument of every model the towers take.
    """
    del is_training
    with tf.compat.v1.variable_scope("conv1") as scope:
        conv1 = tf.identity(_conv_relu(images, 3, 0.0), name=scope.name)
        _activation_summary(conv1)
    pool1 = _max_pool(conv1, "pool1")
    norm1 = _lrn(pool1, "norm1")

    with tf.compat.v1.variable_scope("conv2") as scope:
        conv2 = tf.identity(_conv_relu(norm1, CONV_FILTERS, 0.1), scope.name)
        _activation_summary(conv2)
    norm2 = _lrn(conv2, "norm2")
    pool2 = _max_pool(norm2, "pool2")

    with tf.compat.v1.variable_scope("local3") as scope:
        # [batch, 6, 6, 64] -> [batch, 2304]: one vector per image.
        flat = tf.reshape(
            pool2, [-1, pool2.shape[1] * pool2.shape[2] * CONV_FILTERS]
        )
        local3 = variables.fully_connected(
            flat, LOCAL3_UNITS, LOCAL_STDDEV, LOCAL_WEIGHT_DECAY, 0.1
        )
        local3 = tf.nn.relu(local3, name=scope.name)
        _activation_summary(local3)

    with tf.compat.v1.variable_scope("local4") as scope:
        local4 = variables.fully_connected(
            local3, LOCAL4_UNITS, LOCAL_STDDEV, LOCAL_WEIGHT_DECAY, 0.1
        )
        local4 = tf.nn.relu(local4, name=scope.name)
        _activation_summary(local4)

    with tf.compat.v1.variable_scope("softmax_linear") as scope:
        # Weight decay 0.0: the tutorial's zero term.
        logits = variables.fully_connected(
            local4, NUM_CLASSES, 1.0 / LOCAL4_UNITS, 0.0, 0.0
        )
        logits = tf.cast(logits, tf.float32, name=scope.name)
        _activation_summary(logits)
    return logits


def loss(logits, labels):
    """The total loss, float32 scalar, of logits float32 [batch, 10] and
    labels int32 [batch]: the mean cross-entropy, added to the `losses`
    collection, plus its weight decay and regularization terms."""
    towers.add_cross_entropy(logits, labels)
    return tf.add_n(
        tf.compat.v1.get_collection("losses")
        + towers.regularization_losses(""),
        name="total_loss",
    )


def learning_rate(global_step, examples_per_step):
    """The tutorial's schedule: 0.1, times 0.1 every 350 epochs (staircase);
    float32 scalar, summarised as 'Loss/learning_rate'."""
    steps_per_epoch = NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN / examples_per_step
    lr = tf.compat.v1.train.exponential_decay(
        INITIAL_LEARNING_RATE,
        global_step,
        int(steps_per_epoch * NUM_EPOCHS_PER_DECAY),
        LEARNING_RATE_DECAY_FACTOR,
        staircase=True,
    )
    summaries.scalar_summary(summaries.FIRST_GROUP + "learning_rate", lr)
    return lr


def optimizer(lr):
    return tf.compat.v1.train.GradientDescentOptimizer(lr)


def apply_gradients(opt, grads_and_vars, global_step, update_ops=()):
    """The training op: the gradients applied once, then the moving
    averages; update_ops (the batch-norm updates) run with it."""
    if update_ops and step_optimizer.skipped_steps(opt) is not None:
        raise ValueError(
            "--fp16_enable_auto_loss_scale skips the steps whose gradients "
            "overflow, but the one-device trainer would still update the "
            "model's batch-norm statistics on them; train it with "
            "cifar10_multi_gpu_train.py --num_gpus=1"
        )
    (grads_and_vars,) = step_optimizer.skip_unless_finite(opt, [grads_and_vars])
    apply_op = opt.apply_gradients(grads_and_vars, global_step=global_step)
    summaries.add_histograms(grads_and_vars)
    # The eval restores these shadow values instead of the raw variables.
    return step_optimizer.average_variables(
        [apply_op, *update_ops],
        global_step,
        step_optimizer.step_applied(opt),
        MOVING_AVERAGE_DECAY,
    )


def train(
    total_loss,
    global_step,
    *,
    batch_size=None,
    clip_norm=0.0,
    loss_scaling=None,
    learning_rate_fn=learning_rate,
    optimizer_fn=optimizer,
):
    """The one-device training op, in the graph's update block.

    batch_size None reads --batch_size, as the tutorial's two-argument call
    does; clip_norm > 0 scales the gradients to at most that global norm.
    """
    if batch_size is None:
        batch_size = _flags().batch_size
    # Update the loss averages before the gradients, as the tutorial does.
    loss_averages_op = summaries.add_loss_summaries(total_loss, global_step)
    with tf.name_scope(summaries.UPDATE + "/"):
        lr = learning_rate_fn(global_step, batch_size)
        opt = step_optimizer.wrap(optimizer_fn(lr), loss_scaling)
        with tf.control_dependencies([loss_averages_op]):
            grads = opt.compute_gradients(total_loss)
        if clip_norm > 0:
            grads = towers.clip_gradients(grads, clip_norm)
        return apply_gradients(
            opt, grads, global_step, towers.batch_norm_updates(None)
        )


def variables_to_restore():
    """The moving averages' names in the checkpoints -> the variables."""
    averages = tf.compat.v1.train.ExponentialMovingAverage(MOVING_AVERAGE_DECAY)
    return {
        summaries.without_blocks(name): var
        for name, var in averages.variables_to_restore().items()
    }
