"""The step's optimizer: the model's, in the wrappers of the step
(`_Wrapper`), chosen once by the kind of run (`StepOptimizer`).

Loss scaling for float16, as tf_cnn_benchmarks does it: gradients below
about 6e-8 round to zero in float16; the loss times a power of two shifts
them up (exactly). The dynamic scale halves on a non-finite gradient
(float16 overflows at 65504), skipping the step, and doubles after
`inc_every_n` good steps.
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
LossScaling.__doc__ = """The loss scaling of the --fp16_* flags."""

Dtypes = collections.namedtuple("Dtypes", "compute_dtype loss_scaling")
Dtypes.__doc__ = """What a step computes in: compute_dtype, the layers'
`tf.DType`; loss_scaling, its `LossScaling` for float16, or None."""


def loss_scaling(compute_dtype, scale, dynamic, inc_every_n, sync_replicas):
    """The `LossScaling` of the --fp16_* flags, None unless float16;
    the dynamic scale is refused with sync_replicas, whose chief applies the
    gradients without the workers' finite checks.
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


class _Wrapper(tf.compat.v1.train.Optimizer):
    """An optimizer around another: its gradients, more around its
    `apply_gradients`."""

    def __init__(self, optimizer, name):
        super().__init__(use_locking=False, name=name)
        self._optimizer = optimizer

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)


class LossScaleOptimizer(_Wrapper):
    """Scales the loss, unscales the gradients, skips non-finite steps
    (dynamic scale); with a fixed scale the loop's NaN check ends the run.
    """

    def __init__(self, optimizer, scaling):
        super().__init__(optimizer, "LossScale")
        self._scaling = scaling
        self.dynamic = scaling.dynamic
        # bool scalar, whether the reduced gradients are finite: set by
        # `skip_unless_finite`, which comes first.
        self.finite = None
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

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The global step counts skipped steps too, so --max_steps
        bounds the run whatever the scale does.
        """
        if not self._scaling.dynamic:
            return self._optimizer.apply_gradients(
                grads_and_vars, global_step, name
            )
        finite = self.finite
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
    """bool scalar; each gradient is checked on its own device."""
    checks = []
    for g, _ in grads_and_vars:
        if g is not None:
            with tf.device(g.device):
                checks.append(tf.reduce_all(tf.math.is_finite(g)))
    return tf.reduce_all(checks)


def _zeros_unless(finite, grad):
    if grad is None:
        return None
    with tf.device(grad.device):
        return tf.where(finite, grad, tf.zeros_like(grad))


def skip_unless_finite(optimizer, copies):
    """The reduced gradients (one list per copy), zeroed where the
    dynamic scale skips the step (zeros keep the histograms finite). Checked
    once, on the gradients as reduced and clipped, as tf_cnn_benchmarks does:
    every copy on every worker skips together. Call it before `step_applied`.
    """
    if not _is_dynamic(optimizer):
        return copies
    optimizer.finite = _all_finite(copies[0])
    return [
        [(_zeros_unless(optimizer.finite, g), v) for g, v in grads_and_vars]
        for grads_and_vars in copies
    ]


def step_applied(optimizer):
    """bool scalar, False on a step the dynamic scale skips."""
    if not _is_dynamic(optimizer):
        return tf.constant(True)
    assert optimizer.finite is not None, "skip_unless_finite comes first"
    return optimizer.finite


def skipped_steps(optimizer):
    return optimizer.skipped_steps if _is_dynamic(optimizer) else None


def _is_dynamic(optimizer):
    return isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic


def find_skipped_steps(graph):
    """(int64 skipped steps, float32 loss scale) variables of a
    graph that scales its loss dynamically, else None.
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


Steps = collections.namedtuple(
    "Steps", "max_steps replicas_to_aggregate num_workers decay"
)
Steps.__doc__ = """What the step's optimizer counts; max_steps and decay
may be None."""

StepOptimizer = collections.namedtuple(
    "StepOptimizer", "optimizer scaled sync moves_averages"
)
StepOptimizer.__doc__ = """The step's optimizer, chosen once by the kind of
run (`kinds.Kind.step_optimizer`); scaled is the towers' loss-scaled one it
wraps; sync, the `SyncReplicasOptimizer` or None; moves_averages, whether
its update moves the moving averages itself.
"""


def plain(optimizer, steps):
    return StepOptimizer(optimizer, optimizer, None, False)


def claiming(optimizer, steps):
    """A ps cluster: each step claims its global step before it writes
    (`_ClaimingOptimizer`).
    """
    if steps.max_steps is None:
        return plain(optimizer, steps)
    claiming_optimizer = _ClaimingOptimizer(optimizer, steps.max_steps)
    return StepOptimizer(claiming_optimizer, optimizer, None, False)


def sync_replicas(optimizer, steps):
    """A ps cluster with --sync_replicas: the chief applies a global
    step's gradients, then the moving averages, once.
    """
    averaged = optimizer
    if steps.decay is not None:
        averaged = AveragedOptimizer(optimizer, steps.decay)
    sync = _SyncReplicasOptimizer(
        averaged,
        replicas_to_aggregate=steps.replicas_to_aggregate,
        total_num_replicas=steps.num_workers,
    )
    return StepOptimizer(sync, optimizer, sync, steps.decay is not None)


class _SyncReplicasOptimizer(tf.compat.v1.train.SyncReplicasOptimizer):
    """A `SyncReplicasOptimizer` whose chief's queue runner takes the
    cancelled sync step of the session's close for its end (TensorFlow's
    prints 'Exception in thread QueueRunnerThread-...').
    """

    def get_chief_queue_runner(self):
        runner = super().get_chief_queue_runner()
        return tf.compat.v1.train.QueueRunner(
            runner.queue,
            runner.enqueue_ops,
            runner.close_op,
            runner.cancel_op,
            queue_closed_exception_types=(
                tf.errors.OutOfRangeError,
                tf.errors.CancelledError,
            ),
        )


def refuse_sync_statistics(step, statistics_updates, model_name):
    if step.sync is not None and statistics_updates:
        raise ValueError(
            "--sync_replicas: --model=%s has batch-norm statistics, which "
            "every worker would commit from its own batch, several times per"
            " global step; drop --sync_replicas (or train it in a cluster of"
            " workers only: --variable_update=replicated, no --ps_hosts)"
            % model_name
        )


class _ClaimingOptimizer(_Wrapper):
    """An optimizer whose update runs once its step claimed its global
    step (a ps cluster, where a step begun before another worker reached
    --max_steps would land after it). The claim is one atomic op, after every
    gradient; one at last_step raises `tf.errors.OutOfRangeError`, which ends
    a `MonitoredSession`.
    """

    def __init__(self, optimizer, last_step):
        super().__init__(optimizer, "ClaimingOptimizer")
        self._last_step = last_step

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        made = [grad.op for grad, _ in grads_and_vars if grad is not None]
        with tf.control_dependencies(made):
            # `tf.compat.v1.count_up_to`, without its deprecation warning.
            claim = tf.raw_ops.ResourceCountUpTo(
                resource=global_step.handle,
                limit=self._last_step,
                T=global_step.dtype,
                name="claimed_step",
            )
        with tf.control_dependencies([claim]):
            return self._optimizer.apply_gradients(grads_and_vars, name=name)


def average_variables(update_ops, global_step, applied, decay):
    """The moving averages' update of the weights and statistics,
    after update_ops, at min(decay, (1 + step) / (10 + step)) (the num_updates
    rule of `ExponentialMovingAverage`), 1 on a step not applied.
    """
    # One block in TensorBoard; the shadows' names keep no scope.
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


class AveragedOptimizer(_Wrapper):
    """An optimizer whose update then moves the moving averages, once
    per global step in `SyncReplicasOptimizer`'s chief (as Inception's
    distributed trainer), before the global step moves: whoever sees step N
    sees its averages.
    """

    def __init__(self, optimizer, decay):
        super().__init__(optimizer, "AveragedOptimizer")
        self._decay = decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        apply_op = self._optimizer.apply_gradients(grads_and_vars, name=name)
        # Nothing else increments the step: this reads it before the
        # increment below, which waits for the averages.
        averages = average_variables(
            [apply_op], global_step + 1, tf.constant(True), self._decay
        )
        with tf.control_dependencies([averages]):
            return tf.compat.v1.assign_add(global_step, 1).op
