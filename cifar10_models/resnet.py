"""The CIFAR-10 ResNets of He et al. 2016, section 4.2, in TF1 layers.

"Deep Residual Learning for Image Recognition" (arXiv:1512.03385): a 3x3
convolution of 16 filters, then three stages of n residual blocks (two 3x3
convolutions each, with batch norm) of 16, 32 and 64 filters on feature
maps halved by the first block of stages 2 and 3, global average pooling,
a 10-way fully connected layer: 6n + 2 layers. The shortcuts are option A:
identities, subsampled and zero-padded where the shape changes, so they add
no parameter. Published: ResNet-20 (n = 3) 0.27M parameters, 8.75% test
error; ResNet-56 (n = 9) 0.85M, 6.97% (on 32x32 images; our input is the
tutorial's 24x24 crops).
"""

import tensorflow as tf

# The paper's recipe (section 4.2): SGD with momentum, weight decay, the
# learning rate for 128 examples per step and the steps (of 128 examples)
# at which it is divided by 10.
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
INITIAL_LEARNING_RATE = 0.1
EXAMPLES_PER_STEP = 128
DECAY_STEPS = (32000, 48000)

# Residual blocks per stage (n) of each depth 6n + 2.
RESNET20_BLOCKS = 3
RESNET56_BLOCKS = 9
# Filters of the first convolution and of the three stages.
STAGE_FILTERS = (16, 32, 64)
NUM_CLASSES = 10

# Batch norm as in the authors' Torch code (fb.resnet.torch): the moving
# statistics take 10% of each batch's, epsilon 1e-5.
BATCH_NORM_MOMENTUM = 0.9
BATCH_NORM_EPSILON = 1e-5


def resnet20(images, is_training):
    """ResNet-20: float [batch, 24, 24, 3] -> float32 [batch, 10] logits."""
    return resnet(images, is_training, RESNET20_BLOCKS)


def resnet56(images, is_training):
    """ResNet-56: float [batch, 24, 24, 3] -> float32 [batch, 10] logits."""
    return resnet(images, is_training, RESNET56_BLOCKS)


def resnet(images, is_training, blocks_per_stage):
    """The ResNet of 6 * blocks_per_stage + 2 layers: images float32 (or
    float16, bfloat16) [batch, height, width, 3] -> logits [batch, 10], in
    the images' dtype."""
    x = _conv(images, STAGE_FILTERS[0], 1, "conv1")
    x = tf.nn.relu(_batch_norm(x, is_training, "bn1"))
    for stage, filters in enumerate(STAGE_FILTERS, start=1):
        for block in range(1, blocks_per_stage + 1):
            # The first block of stages 2 and 3 halves the feature maps.
            strides = 2 if stage > 1 and block == 1 else 1
            name = "stage%d/block%d" % (stage, block)
            x = _residual_block(x, filters, strides, is_training, name)
    # [batch, h, w, 64] -> [batch, 64]: global average pooling.
    x = tf.reduce_mean(x, axis=[1, 2])
    return tf.compat.v1.layers.dense(
        x,
        NUM_CLASSES,
        kernel_initializer=_he_normal(),
        kernel_regularizer=_weight_decay,
        name="fc",
    )


def _residual_block(x, filters, strides, is_training, name):
    """conv-bn-relu-conv-bn, plus the shortcut, then relu."""
    with tf.compat.v1.variable_scope(name):
        y = _conv(x, filters, strides, "conv1")
        y = tf.nn.relu(_batch_norm(y, is_training, "bn1"))
        y = _batch_norm(_conv(y, filters, 1, "conv2"), is_training, "bn2")
        return tf.nn.relu(y + _shortcut(x, filters, strides))


def _shortcut(x, filters, strides):
    """Option A: x subsampled by strides, its channels zero-padded."""
    if strides == 1 and x.shape[-1] == filters:
        return x
    x = x[:, ::strides, ::strides, :]
    extra = filters - x.shape[-1]
    return tf.pad(x, [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]])


def _conv(x, filters, strides, name):
    # No bias: the batch norm that follows has its own offset (beta).
    return tf.compat.v1.layers.conv2d(
        x,
        filters,
        3,
        strides,
        padding="same",
        use_bias=False,
        kernel_initializer=_he_normal(),
        kernel_regularizer=_weight_decay,
        name=name,
    )


def _batch_norm(x, is_training, name):
    return tf.compat.v1.layers.batch_normalization(
        x,
        momentum=BATCH_NORM_MOMENTUM,
        epsilon=BATCH_NORM_EPSILON,
        training=is_training,
        name=name,
    )


def _he_normal():
    # He et al. 2015's initialisation, which the paper uses.
    return tf.compat.v1.variance_scaling_initializer(scale=2.0)


def _weight_decay(weights):
    # SGD's weight decay w <- w - lr * wd * w as a loss: wd * |w|^2 / 2.
    return WEIGHT_DECAY * tf.nn.l2_loss(weights)
