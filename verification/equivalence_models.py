"""The models of the equivalence runner, beside the tutorial's and ResNet-20.

Each is `(images, is_training) -> logits` as a user writes one: one with
TF1 layers (batch norm, a kernel regularizer), one with plain
`get_variable` calls (regularizers and a constraint), the ways TF1 code
asks for weight decay and projections; and two idioms of TensorFlow's
official ResNet: a custom getter that passes its arguments on by
position, and a weight decay over `tf.compat.v1.trainable_variables()`.
"""

import tensorflow as tf

from cifar10_models import registry

# The L2 factor of the models' regularizers: large, so that the decay moves
# the weights as much as the data does and a lost term shows.
WEIGHT_DECAY = 0.5
# The constraint of the get_variable model: every weight within +-CLIP.
CLIP = 0.05
NUM_CLASSES = 10


def _l2(weights):
    return WEIGHT_DECAY * tf.nn.l2_loss(weights)


def layers_model(images, is_training):
    """conv (L2) - batch norm - ReLU - mean - dense: [batch, 10] logits."""
    layers = tf.compat.v1.layers
    x = layers.conv2d(
        images,
        8,
        3,
        strides=2,
        use_bias=False,
        kernel_regularizer=_l2,
        name="conv",
    )
    x = layers.batch_normalization(x, training=is_training, name="bn")
    x = tf.reduce_mean(tf.nn.relu(x), [1, 2])  # [batch, 8]
    return layers.dense(x, NUM_CLASSES, kernel_regularizer=_l2, name="dense")


def _clip(weights):
    return tf.clip_by_value(weights, -CLIP, CLIP)


def get_variable_model(images, is_training):
    """conv (L2, clipped) - ReLU - mean - linear (L2): [batch, 10] logits."""
    del is_training
    depth = images.shape[-1]
    kernel = tf.compat.v1.get_variable(
        "conv/kernel",
        [3, 3, depth, 8],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
        regularizer=_l2,
        constraint=_clip,
    )
    x = tf.nn.conv2d(images, tf.cast(kernel, images.dtype), 2, "SAME")
    x = tf.reduce_mean(tf.nn.relu(x), [1, 2])  # [batch, 8]
    weights = tf.compat.v1.get_variable(
        "linear/weights",
        [8, NUM_CLASSES],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.1),
        regularizer=_l2,
    )
    return tf.matmul(x, tf.cast(weights, x.dtype))


def _float32_getter(
    getter, name, shape=None, dtype=tf.float32, *args, **kwargs
):
    """The official ResNet's custom getter (official/resnet/resnet_model.py):
    a variable asked for in float16 is made float32 and cast, the getter's
    arguments passed on by position, as TF1 allows."""
    if dtype == tf.float16:
        var = getter(name, shape, tf.float32, *args, **kwargs)
        return tf.cast(var, dtype, name=name + "_cast")
    return getter(name, shape, dtype, *args, **kwargs)


def custom_getter_model(images, is_training):
    """conv - ReLU - mean - dense under the official ResNet's custom getter:
    [batch, 10] logits."""
    del is_training
    layers = tf.compat.v1.layers
    with tf.compat.v1.variable_scope(
        "resnet_model", custom_getter=_float32_getter
    ):
        x = layers.conv2d(images, 8, 3, strides=2, use_bias=False, name="conv")
        x = tf.reduce_mean(tf.nn.relu(x), [1, 2])  # [batch, 8]
        return layers.dense(x, NUM_CLASSES, name="dense")


def trainable_decay_model(images, is_training):
    """conv - ReLU - mean - dense: [batch, 10] logits, and a weight decay
    over every trainable variable in the `losses` collection, as the
    official ResNet's run loop writes it (there in its model_fn)."""
    del is_training
    layers = tf.compat.v1.layers
    x = layers.conv2d(images, 8, 3, strides=2, use_bias=False, name="conv")
    x = tf.reduce_mean(tf.nn.relu(x), [1, 2])  # [batch, 8]
    logits = layers.dense(x, NUM_CLASSES, name="dense")
    tf.compat.v1.add_to_collection(
        "losses",
        WEIGHT_DECAY
        * tf.add_n(
            [tf.nn.l2_loss(v) for v in tf.compat.v1.trainable_variables()]
        ),
    )
    return logits


# The layers model with the ResNets' recipe (momentum 0.9, the rate scaled
# with the global batch: a rate counted from one tower's batch shows), the
# get_variable model with the tutorial's (plain gradient descent, 0.1).
LAYERS_MODEL = registry.MODELS["resnet20"]._replace(
    name="layers", build=layers_model
)
GET_VARIABLE_MODEL = registry.TUTORIAL._replace(
    name="get_variable", build=get_variable_model
)
# The official ResNet's idioms, with the tutorial's recipe.
CUSTOM_GETTER_MODEL = registry.TUTORIAL._replace(
    name="custom_getter", build=custom_getter_model
)
TRAINABLE_DECAY_MODEL = registry.TUTORIAL._replace(
    name="trainable_decay", build=trainable_decay_model
)
