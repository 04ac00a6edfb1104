"""What the equivalence runner's one device keeps beside its weights.

Built from the graph's own collections and TensorFlow's classes, never
from the suite's lists, so that a variable the towers forget to average
or a state they forget to keep shows as a difference instead of
cancelling: the moving averages' variables, the losses' averages, the
loss scale's state.
"""

import tensorflow as tf

from multigpu.graph import blocks, loss_scale

# The losses' moving averages of the trainers' summaries (the tutorial's
# cifar10._add_loss_summaries decay).
LOSS_AVERAGE_DECAY = 0.9


def model_variables(before):
    """The global variables made since `before`: the model's own.

    Weights and batch-norm statistics, trainable or not, as the
    GLOBAL_VARIABLES collection holds them; call it after the model is
    built and before the optimizer makes its slots.

    Args:
      before: list of the global variables before the model was built.
    """
    return [
        var
        for var in tf.compat.v1.global_variables()
        if all(var is not each for each in before)
    ]


def loss_averages(slice_losses, total_loss, scope):
    """The moving averages (decay 0.9, from 0) of one slice's losses.

    Named as the trainers name theirs: 'summaries/cross_entropy/avg',
    'summaries/conv1/weight_loss/avg', ..., 'summaries/total_loss/avg'.

    Args:
      slice_losses: dict name ('cross_entropy') -> float32 scalar.
      total_loss: float32 scalar, the slice's loss with regularization.
      scope: str, the slice's name scope, stripped from the `losses`
        collection's names.

    Returns:
      The op that updates the averages.
    """
    named = dict(slice_losses)
    for each in tf.compat.v1.get_collection("losses", scope):
        named[each.op.name[len(scope) :]] = each
    named["total_loss"] = total_loss
    with tf.name_scope(blocks.SUMMARIES + "/"):
        averaged = [
            tf.identity(each, name=name) for name, each in named.items()
        ]
        averages = tf.compat.v1.train.ExponentialMovingAverage(
            LOSS_AVERAGE_DECAY, name="avg"
        )
        return averages.apply(averaged)


def loss_scale_state(scaling):
    """The loss scale's variables after finite steps; the op of one step.

    A fixed scale keeps its scale and counts nothing; a dynamic one counts
    each finite step as good (it grows only after `inc_every_n` of them)
    and skips none.

    Args:
      scaling: a `loss_scale.LossScaling`, or None (no variables).

    Returns:
      A list of the ops of one step (empty for a fixed or no scale).
    """
    if scaling is None:
        return []
    get = tf.compat.v1.get_variable
    scale = tf.constant(scaling.initial_scale, tf.float32)
    get("loss_scale", initializer=scale, trainable=False)
    good = get(
        "loss_scale_good_steps",
        initializer=tf.constant(0, tf.int32),
        trainable=False,
    )
    if not scaling.dynamic:
        return []
    get(
        loss_scale.SKIPPED_STEPS,
        initializer=tf.constant(0, tf.int64),
        trainable=False,
    )
    return [good.assign_add(1)]
