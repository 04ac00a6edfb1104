"""The step's optimizer: the model's, in the wrappers of the step
(`_Wrapper`), chosen once by the kind of run (`StepOptimizer`).

Loss scaling for float16 compute, as tf_cnn_benchmarks does it: float16
has 5 exponent bits, and gradients below about 6e-8 round to zero in the
backward pass. The loss times a scale S (a power of two: both
multiplications are exact) shifts every gradient up by S; the float32
gradients divided by S are the true values. A fixed scale can overflow
float16 (65504) instead: the dynamic scale starts at the fixed one, skips
the update and halves the scale when a gradient is not finite, and doubles
it after `inc_every_n` good steps in a row. It lives in non-trainable
variables, so a resumed run keeps it.

In a ps cluster each worker applies its own steps to the one global step
on the ps tasks, and stops once it reads the global step at --max_steps
(`StopAtStepHook`), but a step it or another worker began before then
still lands after it: two workers that each start a step at step 5 of 6
would leave the global step at 7, a checkpoint past --max_steps. There
each step claims its global step in one atomic op once its gradients are
made, and one whose claim would pass --max_steps writes nothing
(`claiming`).

Every trainer moves the moving averages of the weights and statistics,
which the eval reads, with its step (`average_variables`), but for the ps
cluster with --sync_replicas, where every worker's step only sends
gradients and the chief moves the averages once per global step after
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

Dtypes = collections.namedtuple("Dtypes", "compute_dtype loss_scaling")
Dtypes.__doc__ = """What a step computes in: compute_dtype, the layers'
`tf.DType`; loss_scaling, its `LossScaling` for float16, or None."""


def loss_scaling(compute_dtype, scale, dynamic, inc_every_n, sync_replicas):
    """The loss scaling of a run, or None when it computes not in float16.

    Args:
      compute_dtype: the towers' compute dtype.
      scale, dynamic, inc_every_n: the --fp16_* flags.
      sync_replicas: bool, whether the kind of run aggregates the workers'
        gradients (`kinds.Kind.sync`).

    Raises:
      ValueError: a scale below 1, or the dynamic scale with --sync_replicas
        (whose chief applies the gradients in a run of its own, without
        the workers' finite checks).
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
    """An optimizer around another, the one way the step wraps one: its
    gradients are the wrapped one's (the loss scale changes what it asks
    of them), its `apply_gradients` does more around the wrapped one's."""

    def __init__(self, optimizer, name):
        """optimizer: the `Optimizer` to wrap; name: str, the wrapper's."""
        super().__init__(use_locking=False, name=name)
        self._optimizer = optimizer

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)


class LossScaleOptimizer(_Wrapper):
    """Scales the loss, unscales the gradients, skips non-finite steps.

    `compute_gradients` may be called once per tower; `apply_gradients`
    once with the reduced gradients. With the dynamic scale, the reduced
    gradients are checked once (`skip_unless_finite`): not all finite, the
    step applies nothing; with a fixed scale they are kept, and the NaN
    check of the loop ends the run.
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
        """Applies the gradients; the dynamic scale skips non-finite steps.

        The global step counts skipped steps too, so --max_steps bounds the
        run whatever the scale does; `skipped_steps` counts the skipped.
        """
        if not self._scaling.dynamic:
            return self._optimizer.apply_gradients(
                grads_and_vars, global_step, name
            )
        # The check of `skip_unless_finite`, or one on these gradients.
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
        variable), every copy's of the same values; returned as they are
        but for the dynamic scale, zeros on a skipped step.
    """
    if not _is_dynamic(optimizer):
        return copies
    optimizer.finite = _all_finite(copies[0])
    return [
        [(_zeros_unless(optimizer.finite, g), v) for g, v in grads_and_vars]
        for grads_and_vars in copies
    ]


def step_applied(optimizer):
    """bool scalar: whether the step's update is applied: False where the
    dynamic loss scale (optimizer, of `wrap`) skips the step (non-finite
    gradients), when no weight, statistic or moving average may change.
    Call it after `skip_unless_finite`."""
    if not _is_dynamic(optimizer):
        return tf.constant(True)
    assert optimizer.finite is not None, "skip_unless_finite comes first"
    return optimizer.finite


def skipped_steps(optimizer):
    """The int64 variable that counts the skipped steps, or None."""
    return optimizer.skipped_steps if _is_dynamic(optimizer) else None


def _is_dynamic(optimizer):
    """Whether optimizer (of `wrap`) scales its loss dynamically."""
    return isinstance(optimizer, LossScaleOptimizer) and optimizer.dynamic


def find_skipped_steps(graph):
    """(int64 variable, float32 variable): the graph's count of skipped
    steps and its loss scale where it scales its loss dynamically, else
    None."""
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
Steps.__doc__ = """What the step's optimizer counts, of the run and its trainer.

max_steps: int, the global step no step claims past; None for no bound
  (or a trainer whose steps claim nothing).
replicas_to_aggregate, num_workers: ints, the worker steps a sync global
  step averages and the workers of the cluster.
decay: float, the moving averages' (e.g. 0.9999) that a sync chief moves
  after its update; None for a trainer without moving averages.
"""

StepOptimizer = collections.namedtuple(
    "StepOptimizer", "optimizer scaled sync moves_averages"
)
StepOptimizer.__doc__ = """The step's optimizer, chosen once by the kind of
run (its `kinds.Kind.step_optimizer`, one of `plain`, `claiming`,
`sync_replicas`).

optimizer: the `Optimizer` whose `apply_gradients` makes the step.
scaled: the loss-scaled optimizer it wraps (`wrap`), whose gradients the
  towers compute and which says whether the step is applied.
sync: the `SyncReplicasOptimizer` whose session hooks every worker needs
  (`cluster.sync_hooks`), or None.
moves_averages: bool, its update moves the moving averages itself.
"""


def plain(optimizer, steps):
    """One process, a cluster of workers only: the optimizer as it is."""
    return StepOptimizer(optimizer, optimizer, None, False)


def claiming(optimizer, steps):
    """A ps cluster: each step claims its global step before it writes,
    where steps.max_steps bounds the run (`_ClaimingOptimizer`)."""
    if steps.max_steps is None:
        return plain(optimizer, steps)
    claiming_optimizer = _ClaimingOptimizer(optimizer, steps.max_steps)
    return StepOptimizer(claiming_optimizer, optimizer, None, False)


def sync_replicas(optimizer, steps):
    """A ps cluster with --sync_replicas: each worker's step only sends its
    gradients; the chief applies those of a global step, then (steps.decay
    given) the moving averages, once (`AveragedOptimizer`)."""
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
    """A `SyncReplicasOptimizer` whose chief's queue runner ends quietly
    when the chief's session closes.

    After the last step no worker sends gradients, so the session's close
    cancels the runner's sync step (CancelledError). TensorFlow's runner
    ends quietly only on OutOfRangeError and hands any other error to its
    coordinator, which raised it in the thread: 'Exception in thread
    QueueRunnerThread-sync_token_q-...' and a traceback before the chief's
    report. A cancelled sync step is this thread's end, as a closed queue
    is (the runner's `cancel_op` ends a pending enqueue the same way).
    """

    def get_chief_queue_runner(self):
        """The optimizer's queue runner, its ops the same, taking
        CancelledError for its end. Called once, as the chief's session
        begins (by the hook of `make_session_run_hook`)."""
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
    """Refuses --sync_replicas (a step, the `StepOptimizer`, with a sync)
    for a model (model_name: --model) with batch-norm statistics (the ops
    statistics_updates): a sync worker's step sends its gradients and
    ends; every worker's step would commit its own batch's statistics,
    several times per global step."""
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
    step, which then counts the step: the optimizer it wraps increments
    nothing.

    The claim is one atomic op on the global step's device (the placer
    puts it there): of the steps that workers run at once, each gets its
    own global step, and none gets one past last_step, whatever their
    order; one at last_step raises `tf.errors.OutOfRangeError`, which ends
    a `MonitoredSession` as the end of its input does. It waits for every
    gradient, so the step's reads of the global step (its learning rate)
    come before it.
    """

    def __init__(self, optimizer, last_step):
        """optimizer: the `Optimizer` to wrap; last_step: int."""
        super().__init__(optimizer, "ClaimingOptimizer")
        self._last_step = last_step

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Claims global_step (int64 scalar variable), then applies the
        gradients (list of (gradient, variable)); name: of the update."""
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
    """The op that updates the moving averages of the weights and
    statistics, after update_ops (the step's, whose values they take).

    The decay is lower while the global step is small (the num_updates rule
    of `ExponentialMovingAverage`: min(decay, (1 + step) / (10 + step))), and
    1 on a step that is not applied, so that a step skipped by loss scaling
    moves no average.

    Args:
      global_step: int64 scalar, the step the update makes (the global
        step variable, incremented by update_ops).
      applied: bool scalar, `step_applied`.
      decay: float, e.g. the tutorial's 0.9999.
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


class AveragedOptimizer(_Wrapper):
    """An optimizer whose update then moves the moving averages, once.

    Inside `SyncReplicasOptimizer`, which runs it once per global step in
    its chief's queue runner: the averages move once per global step, after
    the weights, as Inception's distributed trainer moves them. Unlike its
    `variable_averages` argument, which the chief applies after it hands
    out the next step's tokens, the global step is incremented after the
    averages: a worker (and the chief's saver) that sees step N sees its
    averages too.
    """

    def __init__(self, optimizer, decay):
        """optimizer: the `Optimizer` to wrap; decay: float, e.g. 0.9999."""
        super().__init__(optimizer, "AveragedOptimizer")
        self._decay = decay

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients (list of (gradient, variable)), the
        averages, then increments global_step (int64 scalar variable) once;
        name: str or None, of the update op."""
        apply_op = self._optimizer.apply_gradients(grads_and_vars, name=name)
        # Nothing else increments the step: this reads it before the
        # increment below, which waits for the averages.
        averages = average_variables(
            [apply_op], global_step + 1, tf.constant(True), self._decay
        )
        with tf.control_dependencies([averages]):
            return tf.compat.v1.assign_add(global_step, 1).op
