"""The step's optimizer: the model's, and the wrappers the step puts around it.

Loss scaling for float16 compute, as tf_cnn_benchmarks does it.

float16 has 5 exponent bits: gradients below about 6e-8 round to zero in
the backward pass. Multiplying the loss by a scale S before the gradients
are computed shifts every gradient up by S; dividing the float32 gradients
by S afterwards gives back the true values, so where nothing underflows the
step is unchanged (S is a power of two: both multiplications are exact).

A fixed scale can overflow float16 (65504) instead. The dynamic scale
starts at the fixed one, skips the update and halves the scale when a
gradient is not finite, and doubles it after `inc_every_n` good steps in a
row. It lives in non-trainable variables, so a resumed run keeps it.

A step that claims its global step before it writes any variable.

In a ps cluster each worker applies its own steps to the one global step
on the ps tasks. A worker stops once it reads the global step at
--max_steps (`StopAtStepHook`), but a step it or another worker began
before then still lands after it: two workers that each start a step at
step 5 of 6 leave the global step at 7, a checkpoint past --max_steps.
Here each step claims its global step in one atomic op once its gradients
are made, and one whose claim would pass --max_steps writes nothing.

The moving averages of the weights and statistics, which the eval reads.

Every trainer updates them with its step (`average_variables`), but for
the ps cluster with --sync_replicas: there every worker's step only sends
gradients, and the chief updates the averages once per global step after
applying them (`AveragedOptimizer`).
"""

import collections

import tensorflow as tf

from multigpu.graph import any_model


# tf_cnn_benchmarks' defaults: --fp16_loss_scale 128 with float16, and
# --fp16_inc_loss_scale_every_n 1000 for the dynamic scale.
DEFAULT_LOSS_SCALE = 128.0
DEFAULT_INC_EVERY_N = 1000

# The dynamic scale changes by this factor, never below MIN_LOSS_SCALE.
LOSS_SCALE_FACTOR = 2.0
MIN_LOSS_SCALE = 1.0

# The variable that counts the steps the dynamic scale skipped.
SKIPPED_STEPS = "loss_scale_skipped_steps"

LossScaling = collections.namedtuple(
    "LossScaling", "initial_scale dynamic inc_every_n"
)
LossScaling.__doc__ = """The loss scaling of a run.

initial_scale: float, the (starting) scale.
dynamic: bool, halve on non-finite gradients, double after good steps.
inc_every_n: int, good steps in a row before the scale doubles.
"""


def loss_scaling(compute_dtype, scale, dynamic, inc_every_n, sync_replicas):
    """The loss scaling of a run, or None when it computes not in float16.

    Args:
      compute_dtype: the towers' compute dtype.
      scale, dynamic, inc_every_n: the --fp16_* flags.
      sync_replicas: bool, whether the cluster aggregates workers' gradients.

    Raises:
      ValueError: a scale below 1, or the dynamic scale with
        --sync_replicas (the chief applies gradients in a run of its own,
        where its workers' finite checks are not computed).
    """
    if compute_dtype != tf.float16:
        return None
    if scale < MIN_LOSS_SCALE:
        raise ValueError("--fp16_loss_scale must be >= 1, got %g" % scale)
    if dynamic and sync_replicas:
        raise ValueError(
            "--fp16_enable_auto_loss_scale does not work with "
            "--sync_replicas; use a fixed --fp16_loss_scale"
        )
    return LossScaling(float(scale), dynamic, inc_every_n)


def wrap(optimizer, scaling):
    """optimizer itself for scaling None, else a `LossScaleOptimizer`."""
    if scaling is None:
        return optimizer
    return LossScaleOptimizer(optimizer, scaling)


class LossScaleOptimizer(tf.compat.v1.train.Optimizer):
    """Scales the loss, unscales the gradients, skips non-finite steps.

    `compute_gradients` may be called once per tower; `apply_gradients`
    once with the reduced gradients. With the dynamic scale, the reduced
    gradients are checked once (`skip_unless_finite`): not all finite, the
    step applies nothing; with a fixed scale they are kept, and the NaN
    check of the loop ends the run.
    """

    def __init__(self, optimizer, scaling):
        super().__init__(use_locking=False, name="LossScale")
        self._optimizer = optimizer
        self._scaling = scaling
        self.dynamic = scaling.dynamic
        self._finite = None
        self.loss_scale = tf.compat.v1.get_variable(
            "loss_scale",
            initializer=tf.constant(scaling.initial_scale, tf.float32),
            trainable=False,
        )
        self.good_steps = tf.compat.v1.get_variable(
            "loss_scale_good_steps",
            initializer=tf.constant(0, tf.int32),
            trainable=False,
        )
        if scaling.dynamic:
            self.skipped_steps = tf.compat.v1.get_variable(
                SKIPPED_STEPS,
                initializer=tf.constant(0, tf.int64),
                trainable=False,
            )

    def compute_gradients(self, loss, var_list=None, **kwargs):
        """Gradients of loss * scale, divided by the scale (float32)."""
        scale = tf.identity(self.loss_scale)
        scaled_loss = loss * tf.cast(scale, loss.dtype)
        grads_and_vars = self._optimizer.compute_gradients(
            scaled_loss, var_list, **kwargs
        )
        return [
            (g / scale if g is not None else None, v) for g, v in grads_and_vars
        ]

    def all_finite(self):
        """bool scalar: whether the step's reduced gradients are finite.

        Set by `skip_unless_finite`, which must run first.
        """
        assert self._finite is not None, "skip_unless_finite comes first"
        return self._finite

    def zeros_unless_finite(self, copies):
        """`skip_unless_finite` of the dynamic scale; keeps its check."""
        self._finite = _all_finite(copies[0])
        return [
            [(_zeros_unless(self._finite, g), v) for g, v in grads_and_vars]
            for grads_and_vars in copies
        ]

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients; the dynamic scale skips non-finite steps.

        The global step counts skipped steps too, so --max_steps bounds the
        run whatever the scale does; `skipped_steps` counts the skipped.
        """
        if not self._scaling.dynamic:
            return self._optimizer.apply_gradients(
                grads_and_vars, global_step, name
            )
        # The check of `skip_unless_finite`, or one on these gradients.
        finite = self._finite
        if finite is None:
            finite = _all_finite(grads_and_vars)
        # On a skipped step no variable (nor optimizer slot) changes.
        apply_op = tf.cond(
            finite,
            lambda: self._apply(grads_and_vars),
            lambda: tf.constant(False),
        )
        with tf.control_dependencies([apply_op]):
            update_scale = self._update_scale(finite)
            if global_step is None:
                return update_scale
            with tf.control_dependencies([update_scale]):
                return tf.compat.v1.assign_add(global_step, 1).op

    def _apply(self, grads_and_vars):
        with tf.control_dependencies(
            [self._optimizer.apply_gradients(grads_and_vars)]
        ):
            return tf.constant(True)

    def _update_scale(self, finite):
        """Halves the scale on a non-finite step, doubles it after a run."""
        good_steps = tf.where(finite, self.good_steps + 1, 0)
        grow = good_steps >= self._scaling.inc_every_n
        new_scale = tf.where(
            finite,
            tf.where(
                grow, self.loss_scale * LOSS_SCALE_FACTOR, self.loss_scale
            ),
            tf.maximum(self.loss_scale / LOSS_SCALE_FACTOR, MIN_LOSS_SCALE),
        )
        return tf.group(
            self.loss_scale.assign(new_scale),
            self.good_steps.assign(tf.where(grow, 0, good_steps)),
            self.skipped_steps.assign_add(
                tf.cast(tf.logical_not(finite), tf.int64)
            ),
        )


def _all_finite(grads_and_vars):
    """bool scalar: whether every gradient is finite (each checked on its
    own device)."""
    checks = []
    for g, _ in grads_and_vars:
        if g is not None:
            with tf.device(g.device):
                checks.append(tf.reduce_all(tf.math.is_finite(g)))
    return tf.reduce_all(checks)


def _zeros_unless(finite, grad):
    """grad, or zeros of its shape where not finite; on grad's device."""
    if grad is None:
        return None
    with tf.device(grad.device):
        return tf.where(finite, grad, tf.zeros_like(grad))


def skip_unless_finite(optimizer, copies):
    """The reduced gradients, zeroed where the dynamic scale skips the step.

    The check is taken once, on the gradients as reduced (and clipped), as
    tf_cnn_benchmarks does: a tower's overflow makes the mean non-finite,
    and in a cluster of workers only every worker holds the same mean, so
    every copy on every worker skips or applies together. Zeros keep the
    histograms and averages of a skipped step finite. Call it once, before
    `step_applied` and `apply_gradients`.

    Args:
      optimizer: the optimizer of `wrap`.
      copies: list (one per copy of the variables) of lists of (gradient,
        variable); every copy's gradients have the same values.

    Returns:
      copies, their gradients zeros on a skipped step (the same lists when
      the scale is not dynamic).
    """
    if not (isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic):
        return copies
    return optimizer.zeros_unless_finite(copies)


def step_applied(optimizer):
    """bool scalar: whether the step's update is applied.

    False where the dynamic loss scale skips the step (non-finite
    gradients); then no weight, statistic or moving average may change.
    Call it after `skip_unless_finite`.

    Args:
      optimizer: the optimizer of `wrap`.
    """
    if isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic:
        return optimizer.all_finite()
    return tf.constant(True)


def skipped_steps(optimizer):
    """The int64 variable that counts the skipped steps, or None."""
    if isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic:
        return optimizer.skipped_steps
    return None


def find_skipped_steps(graph):
    """The graph's count of skipped steps and its loss scale, or None.

    Returns:
      (int64 variable, float32 variable) where the graph scales its loss
      dynamically, else None.
    """
    found = {
        var.op.name: var
        for var in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    }
    if SKIPPED_STEPS not in found:
        return None
    return found[SKIPPED_STEPS], found["loss_scale"]


def describe(scaling):
    """One phrase for the logs: 'none', 'fixed 128' or 'dynamic from 128'."""
    if scaling is None:
        return "none"
    if not scaling.dynamic:
        return "fixed %g" % scaling.initial_scale
    return "dynamic from %g, x%g after %d good steps" % (
        scaling.initial_scale,
        LOSS_SCALE_FACTOR,
        scaling.inc_every_n,
    )


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
      applied: bool scalar, `step_applied`.
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
