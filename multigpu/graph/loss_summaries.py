"""The losses' summaries: raw, and as moving averages that start at the first
loss."""

import tensorflow as tf

from multigpu.graph import blocks, summaries

LOSS_AVERAGE_DECAY = 0.9  # Decay of the loss averages in the summaries.


def add_loss_summaries(total_loss, global_step, scope=None):
    """Summarises the losses, raw and as moving averages.

    Everything it makes is in the graph's summaries block: the tags are
    'Loss/cross_entropy', 'local3/weight_loss', ..., and
    'Loss/total_loss' (`summaries.FIRST_GROUP`), each also with ' (raw)'.
    The averages' variables are named after the losses
    ('summaries/cross_entropy/avg', saved as the tutorial's
    'cross_entropy/avg'), whichever block or tower the losses come from, so
    that every trainer's checkpoint holds the same names. The averages
    start at 0, as the tutorial's do; their summaries are zero-debiased
    (divided by 1 - decay^updates, as Adam's moments are), so that a chart
    starts at the first loss. A weight-decay term of wd 0 is averaged but
    not summarised (a flat 0).

    Args:
      total_loss: float32 scalar, e.g. cifar10's `loss` or a tower's total.
      global_step: the global step variable (int64 scalar), which counts
        the updates of the averages.
      scope: str or None, only the `losses` of this name scope (a tower).

    Returns:
      The op that updates the moving averages of the losses; the global
      step must be incremented after it (apply the gradients after it).
    """
    with tf.name_scope(blocks.SUMMARIES + "/"):
        averages = tf.compat.v1.train.ExponentialMovingAverage(
            LOSS_AVERAGE_DECAY, name="avg"
        )
        named_losses = [
            (blocks.without_blocks(each.op.name), each)
            for each in tf.compat.v1.get_collection("losses", scope)
        ] + [("total_loss", total_loss)]
        # The average's variable takes the name of the tensor it averages:
        # an identity of each loss, named as the loss in this block.
        averaged = [tf.identity(each, name=name) for name, each in named_losses]
        # This update's count since step 0, read before the averages move.
        updates = tf.cast(global_step, tf.float32) + 1.0
        with tf.control_dependencies([updates]):
            averages_op = averages.apply(averaged)
        debias = 1.0 - tf.pow(LOSS_AVERAGE_DECAY, updates)
        for (name, each), average in zip(named_losses, averaged):
            if _is_zero_weight_decay(each):
                continue
            tag = summaries.loss_tag(name)
            summaries.scalar_summary(tag + " (raw)", each)
            with tf.control_dependencies([averages_op]):
                updated = averages.average(average).read_value()
            summaries.scalar_summary(tag, updated / debias)
        return averages_op


def _is_zero_weight_decay(loss):
    """Whether loss is `variables.variable_with_weight_decay`'s wd-0 term."""
    return loss.op.type == "Mul" and tf.get_static_value(loss.op.inputs[1]) == 0
