"""The variable helpers of both tutorial models: every variable is made here.

`variable_on_cpu` pins the tutorial's variables to the CPU, as the tutorial
does, for its calls outside the towers; inside them the towers' device
function (`placement.device_function`) decides. `variable_with_weight_decay`
adds a weight-decay term to the `losses` collection; `fully_connected` is
the layer both models build from them.
"""

import tensorflow as tf

from multigpu.graph import placement


def variable_on_cpu(name, shape, initializer):
    """Creates (or, in a reusing scope, gets) a float32 variable on the CPU."""
    with tf.device(placement.VARIABLE_DEVICE):
        return tf.compat.v1.get_variable(
            name, shape, initializer=initializer, dtype=tf.float32
        )


def variable_with_weight_decay(name, shape, stddev, wd):
    """Creates a truncated-normal variable and adds its weight decay.

    Args:
      name: str.
      shape: list of ints.
      stddev: float, stddev of the truncated normal initialiser.
      wd: float or None; when not None, wd * l2_loss(var) joins the `losses`
        collection (in the current name scope, so per tower).

    Returns:
      The float32 variable.
    """
    var = variable_on_cpu(
        name, shape, tf.compat.v1.truncated_normal_initializer(stddev=stddev)
    )
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        tf.compat.v1.add_to_collection("losses", weight_decay)
    return var


def fully_connected(inputs, units, stddev, wd, bias_init):
    """Fully connected layer: inputs [batch, n] -> [batch, units].

    It computes in the inputs' dtype (float32, float16 or bfloat16), the
    variables staying float32.
    """
    dim = inputs.shape[1]
    weights = variable_with_weight_decay(
        "weights", [dim, units], stddev=stddev, wd=wd
    )
    biases = variable_on_cpu(
        "biases", [units], tf.constant_initializer(bias_init)
    )
    return tf.matmul(inputs, tf.cast(weights, inputs.dtype)) + tf.cast(
        biases, inputs.dtype
    )
