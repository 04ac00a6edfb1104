"""The moving averages of the weights and statistics, which the eval reads."""

import tensorflow as tf

from multigpu.graph import any_model


def average_variables(update_ops, global_step, applied, decay):
    """Updates the moving averages of the weights and statistics.

    The decay is lower while the global step is small (the num_updates rule
    of `ExponentialMovingAverage`: min(decay, (1 + step) / (10 + step))), and
    1 on a step that is not applied, so that a step skipped by loss scaling
    moves no average.

    Args:
      update_ops: the step's update ops; the averages take their values.
      global_step: int64 scalar variable, already incremented by them.
      applied: bool scalar, `loss_scale.step_applied`.
      decay: float, e.g. the tutorial's 0.9999.

    Returns:
      The op that updates the averages, after update_ops.
    """
    # One block of the graph in TensorBoard (its initial-value conds were
    # ten nodes at the top level); the shadows' names keep no scope.
    with (
        tf.name_scope("moving_averages"),
        tf.control_dependencies(update_ops),
    ):
        step = tf.cast(global_step, tf.float32)
        early = tf.minimum(decay, (1.0 + step) / (10.0 + step))
        averages = tf.compat.v1.train.ExponentialMovingAverage(
            tf.where(applied, early, 1.0)
        )
        return averages.apply(any_model.moving_average_variables())
