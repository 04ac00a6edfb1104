"""What every multi-tower trainer needs, written once.

A tower is one replica of the model on one device. The variables live on the
CPU; each tower computes the loss and gradients of its own batch; the
gradients are averaged on the CPU and applied once per step. This module
holds the pieces the trainers share:

- `tower_devices`: which device each tower runs on.
- `build_towers`: one tower per device under `tower_N` name scopes, with
  the variables created by the first tower and reused by the others.
- `tower_total_loss`: the loss of one tower (its `losses` collection).
- `average_gradients`: the per-variable mean of the towers' gradients.
- `session_config`: soft placement and the virtual CPU devices.
- `scalar_summary`, `histogram_summary`: summaries tagged without `tower_N/`.
- `StepLoggerHook`: the classic `step N, loss = L` progress line.

Nothing here reads flags or does work at import.
"""

import datetime
import os
import re
import shutil
import sys
import time

import tensorflow as tf
from absl import app

# Prefix of the name scope of each tower, as in the TF1 tutorial: tower_0, ...
TOWER_NAME = "tower"

# Where the variables live and the gradients are averaged (the TF1 design).
VARIABLE_DEVICE = "/cpu:0"


def tower_devices(num_gpus, cpu_towers):
    """Chooses the device of each tower.

    Args:
      num_gpus: int >= 1, the number of towers asked for.
      cpu_towers: bool, whether towers may run on virtual CPU devices when
        fewer than `num_gpus` GPUs are visible.

    Returns:
      A list of `num_gpus` device strings: '/gpu:i' when enough GPUs are
      visible, otherwise '/cpu:i' (one virtual CPU device per tower).

    Raises:
      ValueError: `num_gpus` < 1, or more GPUs asked for than are visible
        and `cpu_towers` is False.
    """
    if num_gpus < 1:
        raise ValueError("--num_gpus must be at least 1, got %d" % num_gpus)
    visible = len(tf.config.list_physical_devices("GPU"))
    if num_gpus <= visible:
        return ["/gpu:%d" % i for i in range(num_gpus)]
    if not cpu_towers:
        raise ValueError(
            "--num_gpus=%d but %d GPU(s) are visible; pass --cpu_towers to run "
            "the towers on virtual CPU devices" % (num_gpus, visible)
        )
    return ["/cpu:%d" % i for i in range(num_gpus)]


def describe_devices(devices):
    """Returns the log line that says where the towers run."""
    if devices[0].startswith("/cpu"):
        return "No GPU used: %d tower(s) on virtual CPU devices %s" % (
            len(devices),
            ", ".join(devices),
        )
    return "%d tower(s) on %s" % (len(devices), ", ".join(devices))


def session_config(devices=("/cpu:0",), log_device_placement=False):
    """Returns the `ConfigProto` of every session of the suite.

    Soft placement lets ops without a GPU kernel fall back to the CPU. One
    CPU device is created per tower that runs on a CPU, so that CPU towers
    are separate devices exactly as GPU towers are.

    Args:
      devices: the tower device strings from `tower_devices`.
      log_device_placement: bool, whether TensorFlow logs each op's device.
    """
    num_cpu_devices = max(1, sum(d.startswith("/cpu") for d in devices))
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=log_device_placement,
        device_count={"CPU": num_cpu_devices},
    )


def compute_dtype(use_fp16, devices):
    """The dtype the layers compute in (variables stay float32).

    Args:
      use_fp16: bool, whether to compute in reduced precision.
      devices: the tower device strings.

    Returns:
      tf.float32; with use_fp16, tf.float16 on GPUs and tf.bfloat16 on CPUs
      (CPUs have fast bfloat16 kernels, not float16 ones).
    """
    if not use_fp16:
        return tf.float32
    return tf.float16 if devices[0].startswith("/gpu") else tf.bfloat16


def strip_tower_prefix(name):
    """Returns `name` without its 'tower_N/' scopes, e.g. for summary tags."""
    return re.sub("%s_[0-9]+/" % TOWER_NAME, "", name)


def _summary_tag(name):
    scope = tf.compat.v1.get_default_graph().get_name_scope()
    return strip_tower_prefix(scope + "/" + name if scope else name)


def scalar_summary(name, value):
    """Adds a scalar summary to the SUMMARIES collection.

    The op lives in the current name scope (so a tower's summaries can be
    picked by its scope) while the tag leaves out 'tower_N/', so that every
    tower writes under the same tag, e.g. 'total_loss'.

    Args:
      name: str, the tag below the current name scope.
      value: a scalar tensor of a real dtype.
    """
    return _collect(
        tf.raw_ops.ScalarSummary(
            tags=_summary_tag(name), values=value, name=_op_name(name)
        )
    )


def histogram_summary(name, values):
    """Adds a histogram summary tagged like `scalar_summary`.

    Args:
      name: str, the tag below the current name scope.
      values: a tensor of a real dtype, any shape.
    """
    return _collect(
        tf.raw_ops.HistogramSummary(
            tag=_summary_tag(name), values=values, name=_op_name(name)
        )
    )


def last_tower_summaries(scope):
    """Merges the graph's summaries but those of all towers except one.

    Every tower creates the same summaries under the same tags; merging them
    all would repeat each tag, so only the last tower's are kept, with every
    summary made outside the towers (learning rate, histograms, ...).

    Args:
      scope: str, the name scope of the tower to keep, e.g. 'tower_1/'.

    Returns:
      A string scalar, the merged `Summary` protocol buffer.
    """
    tower = re.compile("%s_[0-9]+/" % TOWER_NAME)
    return tf.compat.v1.summary.merge(
        [
            s
            for s in tf.compat.v1.get_collection(
                tf.compat.v1.GraphKeys.SUMMARIES
            )
            if s.op.name.startswith(scope) or not tower.match(s.op.name)
        ]
    )


def image_summary(name, images, max_images=3):
    """Adds an image summary of the first images, tagged like the others.

    Args:
      name: str, the tag below the current name scope.
      images: float32 [batch, height, width, 1 or 3].
      max_images: int, how many images of the batch to show.
    """
    return _collect(
        tf.raw_ops.ImageSummary(
            tag=_summary_tag(name),
            tensor=images,
            max_images=max_images,
            name=_op_name(name),
        )
    )


def _op_name(tag):
    return re.sub(r"[^A-Za-z0-9_./-]", "_", tag)


def _collect(summary):
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SUMMARIES, summary)
    return summary


def tower_total_loss(scope):
    """Sums the `losses` collection of one tower.

    The model's `loss` function adds the cross-entropy of the tower's batch
    and, per weight, a weight-decay term; filtering by the tower's scope
    keeps the other towers' terms out.

    Args:
      scope: str, the tower's name scope, e.g. 'tower_1/'.

    Returns:
      A float32 scalar tensor named '<scope>total_loss'.
    """
    return tf.add_n(
        tf.compat.v1.get_collection("losses", scope), name="total_loss"
    )


def build_towers(devices, optimizer, tower_loss_fn):
    """Builds one tower per device and the gradients of each.

    Args:
      devices: list of device strings, one per tower.
      optimizer: a `tf.compat.v1.train.Optimizer`; only its
        `compute_gradients` is used here.
      tower_loss_fn: callable(scope) -> float32 scalar, builds the inputs,
        model and loss of one tower inside the current device and name scope
        and returns the tower's total loss.

    Returns:
      tower_losses: list of float32 scalars, one per tower.
      tower_grads: list (one per tower) of lists of (gradient, variable).
      scope: str, the name scope of the last tower (for its summaries).
    """
    tower_losses, tower_grads = [], []
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope()):
        for i, device in enumerate(devices):
            with (
                tf.device(device),
                tf.name_scope("%s_%d" % (TOWER_NAME, i)) as scope,
            ):
                loss = tower_loss_fn(scope)
                # The first tower created the variables; the others share them.
                tf.compat.v1.get_variable_scope().reuse_variables()
                tower_losses.append(loss)
                tower_grads.append(optimizer.compute_gradients(loss))
    return tower_losses, tower_grads, scope


def average_gradients(tower_grads):
    """Averages each variable's gradient over the towers.

    This is the synchronisation point of the towers: no variable is updated
    before every tower has computed its gradients.

    Args:
      tower_grads: list (one per tower) of lists of (gradient, variable),
        all in the same variable order.

    Returns:
      A list of (gradient, variable), the gradient the mean over the towers;
      a variable that no tower has a gradient for keeps None.
    """
    average_grads = []
    with tf.device(VARIABLE_DEVICE):
        for grads_and_var in zip(*tower_grads):
            var = grads_and_var[0][1]
            grads = [g for g, _ in grads_and_var if g is not None]
            if grads:
                mean = tf.reduce_mean(tf.stack(grads, axis=0), axis=0)
                average_grads.append((mean, var))
            else:
                average_grads.append((None, var))
    return average_grads


def clip_gradients(grads_and_vars, clip_norm):
    """Scales the gradients so that their global norm is at most clip_norm.

    Args:
      grads_and_vars: list of (gradient, variable).
      clip_norm: float > 0.

    Returns:
      The list of (clipped gradient, variable), None gradients kept.
    """
    grads, variables = zip(*grads_and_vars)
    clipped, _ = tf.clip_by_global_norm(list(grads), clip_norm)
    return list(zip(clipped, variables))


class StepLoggerHook(tf.compat.v1.train.SessionRunHook):
    """Prints `DATE: step N, loss = L (E examples/sec; S sec/batch)`.

    N is the global step reached; E counts the examples of all towers.
    """

    def __init__(self, loss, examples_per_step, log_frequency):
        """Args:
        loss: float32 scalar tensor to print.
        examples_per_step: int, examples consumed by one run of the train op.
        log_frequency: int, print every this many steps.
        """
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._log_frequency = log_frequency
        self.step = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.step = session.run(self._global_step)
        print(
            "%s: training from step %d" % (datetime.datetime.now(), self.step)
        )
        self._start_time = time.time()
        self._runs = 0

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        self.step += 1
        self._runs += 1
        if self._runs % self._log_frequency == 0:
            now = time.time()
            sec_per_batch = (now - self._start_time) / self._log_frequency
            self._start_time = now
            print(
                "%s: step %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)"
                % (
                    datetime.datetime.now(),
                    self.step,
                    run_values.results,
                    self._examples_per_step / sec_per_batch,
                    sec_per_batch,
                ),
                flush=True,
            )


def run_training(
    train_op,
    loss,
    train_dir,
    examples_per_step,
    log_frequency,
    max_steps=None,
    save_checkpoint_steps=1000,
    save_summaries_steps=100,
    summary_op=None,
    config=None,
    clear_train_dir=False,
):
    """Runs the train op until max_steps or the end of the input.

    A `MonitoredTrainingSession` restores the newest checkpoint of train_dir
    (so a restart resumes), saves one every save_checkpoint_steps and at the
    end, and writes summaries and the step logger's line.

    Args:
      train_op: the op of one training step.
      loss: float32 scalar, logged and checked for NaN every step.
      train_dir: str, checkpoints and event files.
      examples_per_step: int, examples of all towers per step.
      log_frequency: int, steps between log lines.
      max_steps: int or None; None trains until the input ends.
      save_checkpoint_steps: int, steps between checkpoints.
      save_summaries_steps: int, steps between summaries.
      summary_op: the summary op to write, default all summaries.
      config: the session's `ConfigProto`.
      clear_train_dir: bool, delete train_dir first instead of resuming.

    Returns:
      int, the global step reached.

    Raises:
      TrainingError: the loss became NaN; no checkpoint of that step is
        written.
    """
    if clear_train_dir and os.path.isdir(train_dir):
        shutil.rmtree(train_dir)
    logger = StepLoggerHook(loss, examples_per_step, log_frequency)
    # The logger runs first, so its step is the step that made the NaN.
    hooks = [logger, tf.compat.v1.train.NanTensorHook(loss)]
    if max_steps is not None:
        hooks.append(tf.compat.v1.train.StopAtStepHook(last_step=max_steps))
    try:
        with tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir=train_dir,
            scaffold=tf.compat.v1.train.Scaffold(summary_op=summary_op),
            hooks=hooks,
            config=config,
            save_checkpoint_steps=save_checkpoint_steps,
            save_checkpoint_secs=None,
            save_summaries_steps=save_summaries_steps,
        ) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    except tf.compat.v1.train.NanLossDuringTrainingError as e:
        raise TrainingError(
            "loss is NaN at step %d; stopped without saving it, the newest "
            "checkpoint is %s"
            % (logger.step, tf.train.latest_checkpoint(train_dir))
        ) from e
    return logger.step


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss diverged)."""


def run_script(main):
    """Runs an absl main; bad input or a failed run exits 1 with one line.

    A `ValueError` (bad flag, file or data) or a `TrainingError` prints
    'SCRIPT: error: MESSAGE' on stderr instead of a traceback.
    """

    def main_with_errors(argv):
        try:
            return main(argv)
        except (ValueError, TrainingError) as e:
            sys.exit("%s: error: %s" % (os.path.basename(sys.argv[0]), e))

    app.run(main_with_errors)
