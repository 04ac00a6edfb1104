"""The variable helpers of both models: every variable is made here.

`variable_on_cpu` is the one place that decides where variables live (the
CPU, so that the towers share one copy); `variable_with_weight_decay` adds
a weight-decay term to the `losses` collection; `fully_connected` is the
layer both models build from them.
"""

import tensorflow as tf

from multigpu.graph import placement


def variable_on_cpu(name, shape, initializer, device=placement.VARIABLE_DEVICE):
    """Creates (or, in a reusing scope, gets) a float32 variable on the CPU.

    The one place that decides where variables live: on `device`, which is
    the CPU unless a trainer passes another (`placement.variable_device`, e.g.
    its first tower's GPU).
    """
    with tf.device(device):
        return tf.compat.v1.get_variable(
            name, shape, initializer=initializer, dtype=tf.float32
        )


def variable_with_weight_decay(
    name, shape, stddev, wd, device=placement.VARIABLE_DEVICE
):
    """Creates a truncated-normal variable and adds its weight decay.

    Args:
      name: str.
      shape: list of ints.
      stddev: float, stddev of the truncated normal initialiser.
      wd: float or None; when not None, wd * l2_loss(var) joins the `losses`
        collection (in the current name scope, so per tower).
      device: str, where the variable lives.

    Returns:
      The float32 variable.
    """
    var = variable_on_cpu(
        name,
        shape,
        tf.compat.v1.truncated_normal_initializer(stddev=stddev),
        device,
    )
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        tf.compat.v1.add_to_collection("losses", weight_decay)
    return var


def fully_connected(
    inputs,
    units,
    stddev,
    wd,
    bias_init,
    compute_dtype,
    variable_device=placement.VARIABLE_DEVICE,
):
    """Fully connected layer: inputs [batch, n] -> [batch, units]."""
    dim = inputs.shape[1]
    weights = variable_with_weight_decay(
        "weights", [dim, units], stddev=stddev, wd=wd, device=variable_device
    )
    biases = variable_on_cpu(
        "biases", [units], tf.constant_initializer(bias_init), variable_device
    )
    return tf.matmul(inputs, tf.cast(weights, compute_dtype)) + tf.cast(
        biases, compute_dtype
    )
