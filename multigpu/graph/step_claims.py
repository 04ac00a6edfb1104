"""A step that claims its global step before it writes any variable.

In a ps cluster each worker applies its own steps to the one global step
on the ps tasks. A worker stops once it reads the global step at
--max_steps (`StopAtStepHook`), but a step it or another worker began
before then still lands after it: two workers that each start a step at
step 5 of 6 leave the global step at 7, a checkpoint past --max_steps.
Here each step claims its global step in one atomic op once its gradients
are made, and one whose claim would pass --max_steps writes nothing.
"""

import tensorflow as tf


def claiming(optimizer, task, max_steps):
    """optimizer, whose steps claim their global step where the kind of
    run asks it (`kinds.Kind.claims_steps`) and --max_steps bounds the
    run; else optimizer itself.

    Args:
      optimizer: a `tf.compat.v1.train.Optimizer`.
      task: this process's `cluster.ClusterTask`.
      max_steps: int, or None for no bound.
    """
    if max_steps is None or not task.kind.claims_steps:
        return optimizer
    return _ClaimingOptimizer(optimizer, max_steps)


def claimed_step(global_step, last_step, grads_and_vars):
    """Claims the next global step, once the gradients are made.

    One atomic op on global_step's device (the placer puts it there):
    of the steps that workers run at once, each gets its own global step,
    and none gets one past last_step, whatever their order.

    Args:
      global_step: int64 scalar resource variable.
      last_step: int, the step no claim goes past.
      grads_and_vars: list of (gradient, variable); the claim waits for
        every gradient, so the step's reads of global_step (its learning
        rate) come before it.

    Returns:
      int64 scalar, global_step before the claim; running it at last_step
      raises `tf.errors.OutOfRangeError`, which ends a `MonitoredSession`
      as the end of its input does.
    """
    made = [grad.op for grad, _ in grads_and_vars if grad is not None]
    with tf.control_dependencies(made):
        # `tf.compat.v1.count_up_to`, without its deprecation warning.
        return tf.raw_ops.ResourceCountUpTo(
            resource=global_step.handle,
            limit=last_step,
            T=global_step.dtype,
            name="claimed_step",
        )


class _ClaimingOptimizer(tf.compat.v1.train.Optimizer):
    """An optimizer whose update runs once its step claimed its global
    step (`claimed_step`), which then counts the step: the optimizer it
    wraps increments nothing."""

    def __init__(self, optimizer, last_step):
        """optimizer: the `Optimizer` to wrap; last_step: int."""
        super().__init__(use_locking=False, name="ClaimingOptimizer")
        self._optimizer = optimizer
        self._last_step = last_step

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Claims global_step (int64 scalar variable), then applies the
        gradients (list of (gradient, variable)); name: of the update."""
        grads_and_vars = list(grads_and_vars)
        claim = claimed_step(global_step, self._last_step, grads_and_vars)
        with tf.control_dependencies([claim]):
            return self._optimizer.apply_gradients(grads_and_vars, name=name)
