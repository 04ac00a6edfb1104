"""Loss scaling for float16 compute, as tf_cnn_benchmarks does it.

float16 has 5 exponent bits: gradients below about 6e-8 round to zero in
the backward pass. Multiplying the loss by a scale S before the gradients
are computed shifts every gradient up by S; dividing the float32 gradients
by S afterwards gives back the true values, so where nothing underflows the
step is unchanged (S is a power of two: both multiplications are exact).

A fixed scale can overflow float16 (65504) instead. The dynamic scale
starts at the fixed one, skips the update and halves the scale when a
gradient is not finite, and doubles it after `inc_every_n` good steps in a
row. It lives in non-trainable variables, so a resumed run keeps it.
"""

import collections

import tensorflow as tf

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
