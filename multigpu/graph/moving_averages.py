"""The moving averages of the weights and statistics, which the eval reads.

Every trainer updates them with its step (`average_variables`), but for
the ps cluster with --sync_replicas: there every worker's step only sends
gradients, and the chief updates the averages once per global step after
applying them (`AveragedOptimizer`).
"""

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
      global_step: int64 scalar, the step the update makes (the global
        step variable, incremented by update_ops).
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


class AveragedOptimizer(tf.compat.v1.train.Optimizer):
    """An optimizer whose update then moves the moving averages, once.

    For the ps cluster with --sync_replicas: `SyncReplicasOptimizer` runs
    the update of the optimizer it wraps once per global step, in its
    chief's queue runner, so the averages move once per global step, after
    the weights, as Inception's distributed trainer moves them. Unlike its
    `variable_averages` argument, which the chief applies after it hands
    out the next step's tokens, here the global step is incremented after
    the averages: a worker (and the chief's checkpoint saver) that sees step
    N sees its averages too.
    """

    def __init__(self, optimizer, decay):
        """optimizer: the `Optimizer` to wrap; decay: float, e.g. 0.9999."""
        super().__init__(use_locking=False, name="AveragedOptimizer")
        self._optimizer = optimizer
        self._decay = decay

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients, the averages, then increments global_step.

        Args:
          grads_and_vars: list of (gradient, variable).
          global_step: int64 scalar variable, incremented once.
          name: str or None, of the update op.
        """
        apply_op = self._optimizer.apply_gradients(grads_and_vars, name=name)
        # Nothing else increments the step: this reads it before the
        # increment below, which waits for the averages.
        averages = average_variables(
            [apply_op], global_step + 1, tf.constant(True), self._decay
        )
        with tf.control_dependencies([averages]):
            return tf.compat.v1.assign_add(global_step, 1).op
