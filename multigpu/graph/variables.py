"""The variables of a model: the tutorial models' helpers, and the checks of
what a user's model asks for (`checked_variables`: else a line deep in
TensorFlow that names neither the model nor the variable).
"""

import contextlib

import tensorflow as tf

from multigpu.graph import any_model, placement, summaries, towers


def variable_on_cpu(name, shape, initializer):
    """Creates (or, in a reusing scope, gets) a float32 variable on the CPU."""
    with tf.device(placement.VARIABLE_DEVICE):
        return tf.compat.v1.get_variable(
            name, shape, initializer=initializer, dtype=tf.float32
        )


def variable_with_weight_decay(name, shape, stddev, wd):
    """A float32 truncated-normal variable; with wd not None, wd *
    l2_loss(var) joins the `losses` collection, per tower (by name scope)."""
    var = variable_on_cpu(
        name, shape, tf.compat.v1.truncated_normal_initializer(stddev=stddev)
    )
    if wd is not None:
        weight_decay = tf.multiply(tf.nn.l2_loss(var), wd, name="weight_loss")
        tf.compat.v1.add_to_collection("losses", weight_decay)
    return var


def fully_connected(inputs, units, stddev, wd, bias_init):
    """inputs [batch, n] -> [batch, units], in the inputs' dtype (float32,
    float16 or bfloat16), the variables float32."""
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


# The names of the suite's own variables: the step counter and the float16
# loss scale (`step_optimizer.LossScaleOptimizer`).
SUITE_VARIABLES = ("global_step", "loss_scale", "loss_scale_good_steps")
# What the suite's optimizer and moving averages append to a variable's
# name for the variables they keep of it ('conv1/weights/Momentum').
SUITE_SUFFIXES = ("Momentum", "ExponentialMovingAverage")


class ModelVariableError(ValueError):
    """A model asked for a variable the towers cannot train."""


@contextlib.contextmanager
def checked_variables(model_name):
    """A scope that refuses, as they are asked for, the variables the
    towers refuse, or a model that made no variable at all."""
    asked = []

    def check(getter, *args, **kwargs):
        kwargs = any_model.by_name(args, kwargs)
        own_name = summaries.without_blocks(kwargs["name"])
        problem = _problem(own_name, kwargs)
        if problem:
            raise ModelVariableError(
                "%s: variable %s %s" % (model_name, own_name, problem)
            )
        asked.append(kwargs["name"])
        return getter(**kwargs)

    made_before = len(tf.compat.v1.global_variables())
    with tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(),
        custom_getter=check,
        auxiliary_name_scope=False,
    ):
        yield
    # Variables made without get_variable are the towers' to name.
    if not asked and len(tf.compat.v1.global_variables()) == made_before:
        raise ModelVariableError(
            "%s creates no variable, so there is nothing to train; give it "
            "a layer with weights (tf.compat.v1.layers, or "
            "tf.compat.v1.get_variable)" % model_name
        )


def _problem(name, kwargs):
    if kwargs.get("partitioner") is not None:
        return (
            "is partitioned: partitioned variables are not supported; "
            "create it whole (no partitioner in get_variable or its "
            "variable_scope)"
        )
    if tf.compat.v1.GraphKeys.LOCAL_VARIABLES in (
        kwargs.get("collections") or ()
    ):
        return (
            "is a local variable, which is left out of checkpoints and "
            "which the towers do not copy; make it a global variable "
            "(trainable=False if it is not trained)"
        )
    dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
    if not dtype.is_floating:
        return (
            "is %s, and the towers keep float variables only (the optimizer "
            "trains them, the moving averages average the others too); make "
            "it float32" % dtype.name
        )
    if name in SUITE_VARIABLES or name.rpartition("/")[2] in SUITE_SUFFIXES:
        return (
            "has a name the suite gives its own variables (%s, or a name "
            "ending in /%s); rename it"
            % (", ".join(SUITE_VARIABLES), " or /".join(SUITE_SUFFIXES))
        )
    if towers.primary_name(name) is not None:
        return (
            "is named like the copy %s/%s_N/... that --variable_update="
            "replicated makes of each variable; rename its scope"
            % (towers.TOWERS_SCOPE, towers.REPLICA_SCOPE)
        )
    return None
