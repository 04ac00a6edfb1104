"""What every multi-tower trainer needs, written once.

A tower is one replica of the model on one device. The variables live on the
CPU (or on the first tower's device, `variable_device`); each tower computes
the loss and gradients of its own batch; the gradients are averaged where the
variables live and applied once per step. This module holds the pieces the
trainers share:

- `tower_devices`: which device each tower runs on.
- `variable_device`: where the variables live and the gradients meet.
- `build_towers`: one tower per device under `tower_N` name scopes, with
  the variables created by the first tower and reused by the others,
  optionally each tower compiled by XLA.
- `stage_on_device`, `WarmUpHook`: each tower's next batch copied to its
  device while the current step computes.
- `tower_total_loss`: the loss of one tower (its `losses` collection).
- `average_gradients`: the per-variable mean of the towers' gradients.
- `session_config`: soft placement and the virtual CPU devices.
- `scalar_summary`, `histogram_summary`: summaries tagged without `tower_N/`.
- `StepLoggerHook`: the classic `step N, loss = L` progress line.
- `run_training`: the training loop, resumed from
  `newest_valid_checkpoint`.

Nothing here reads flags or does work at import.
"""

import collections
import contextlib
import copy
import datetime
import ipaddress
import os
import re
import shutil
import socket
import sys
import threading
import time

import tensorflow as tf
from absl import app, flags

# Prefix of the name scope of each tower, as in the TF1 tutorial: tower_0, ...
TOWER_NAME = "tower"

# Seconds between two looks of a worker at its ps tasks' ports.
WATCHDOG_INTERVAL_SECS = 2

# Seconds a finished session waits for its background threads.
STOP_GRACE_PERIOD_SECS = 5

# Where the variables live and the gradients are averaged (the TF1 design),
# unless --variable_device=tower (see `variable_device`).
VARIABLE_DEVICE = "/cpu:0"

# The --variable_device choices: 'cpu' keeps VARIABLE_DEVICE; 'tower' (or its
# alias 'gpu', tf_cnn_benchmarks' word) uses the first tower's device.
VARIABLE_DEVICE_CHOICES = ("cpu", "tower", "gpu")

# Whether the trainers stage each tower's next batch on its device
# (`stage_on_device`): as fast as reading it in the step on the CPU path
# (0.97x to 1.00x, benchmarks/bench_options.py), and it overlaps the
# host-to-device copy with the compute on GPUs.
PREFETCH_TO_DEVICE_DEFAULT = True

# Checkpoints are train_dir/model.ckpt-STEP (TensorFlow's default name).
CHECKPOINT_BASENAME = "model.ckpt"


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


def variable_device(choice, devices, task=None):
    """Where the variables live and the towers' gradients are averaged.

    'cpu' is the classic TF1 design: one copy in host memory, each GPU
    reads it over PCIe and sends its gradients back. 'tower' puts the
    variables on the first tower's device (tf_cnn_benchmarks'
    --local_parameter_device=gpu): tower 0 reads them in its own memory, the
    other GPUs copy from it peer to peer and the mean is computed there,
    which pays off when the GPUs talk to each other faster than to the host.

    Args:
      choice: one of VARIABLE_DEVICE_CHOICES ('gpu' is 'tower').
      devices: the tower device strings from `tower_devices`.
      task: the `ClusterTask`, or None outside a cluster.

    Returns:
      str, a device: VARIABLE_DEVICE or devices[0].

    Raises:
      ValueError: an unknown choice, or 'tower' in a cluster, where
        `replica_device_setter` puts the variables on the ps tasks.
    """
    if choice not in VARIABLE_DEVICE_CHOICES:
        raise ValueError(
            "--variable_device must be one of %s, got %r"
            % (", ".join(VARIABLE_DEVICE_CHOICES), choice)
        )
    if choice == "cpu":
        return VARIABLE_DEVICE
    if task is not None and task.cluster is not None:
        raise ValueError(
            "--variable_device=%s does not apply in cluster mode: the "
            "variables live on the ps tasks" % choice
        )
    return devices[0]


def describe_devices(devices):
    """Returns the log line that says where the towers run."""
    if devices[0].startswith("/cpu"):
        return "No GPU used: %d tower(s) on virtual CPU devices %s" % (
            len(devices),
            ", ".join(devices),
        )
    return "%d tower(s) on %s" % (len(devices), ", ".join(devices))


def session_config(
    devices=("/cpu:0",), log_device_placement=False, operation_timeout_secs=0
):
    """Returns the `ConfigProto` of every session of the suite.

    Soft placement lets ops without a GPU kernel fall back to the CPU. One
    CPU device is created per tower that runs on a CPU, so that CPU towers
    are separate devices exactly as GPU towers are.

    Args:
      devices: the tower device strings from `tower_devices`.
      log_device_placement: bool, whether TensorFlow logs each op's device.
      operation_timeout_secs: int, an op waiting longer fails with
        DeadlineExceededError (a dead cluster peer); 0 waits forever.
    """
    num_cpu_devices = max(1, sum(d.startswith("/cpu") for d in devices))
    return tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=log_device_placement,
        device_count={"CPU": num_cpu_devices},
        operation_timeout_in_ms=operation_timeout_secs * 1000,
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


def build_towers(devices, optimizer, tower_loss_fn, xla=False):
    """Builds one tower per device and the gradients of each.

    With xla, each tower (its forward and backward pass) is built inside its
    own `tf.xla.experimental.jit_scope`, so XLA compiles the ops of that
    scope that it can and leaves the rest (input, staging, summaries) to
    TensorFlow. An explicit scope is used rather than the session's
    `global_jit_level`: auto-clustering skips CPUs unless TF_XLA_FLAGS is set
    before TensorFlow loads, and it would also cluster the gradient
    averaging and the update, which belong to no tower. On a CPU, Grappler
    fuses each forward convolution with its bias and ReLU (_FusedConv2D)
    before XLA clusters the graph, so those stay in TensorFlow too; there
    the compiled step matches TensorFlow's to 1e-4 of each update and is
    slower (0.84x, benchmarks/bench_options.py): XLA is for GPUs.

    Args:
      devices: list of device strings, one per tower.
      optimizer: a `tf.compat.v1.train.Optimizer`; only its
        `compute_gradients` is used here.
      tower_loss_fn: callable(scope) -> float32 scalar, builds the inputs,
        model and loss of one tower inside the current device and name scope
        and returns the tower's total loss.
      xla: bool, compile each tower with XLA.

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
                _jit_scope(xla),
            ):
                loss = tower_loss_fn(scope)
                # The first tower created the variables; the others share them.
                tf.compat.v1.get_variable_scope().reuse_variables()
                tower_losses.append(loss)
                tower_grads.append(optimizer.compute_gradients(loss))
    return tower_losses, tower_grads, scope


def _jit_scope(xla):
    if xla:
        return tf.xla.experimental.jit_scope()
    return contextlib.nullcontext()


def stage_on_device(tensors):
    """Stages tensors on the current device, one step ahead.

    Call it inside a tower's device and name scope, with the batch the tower
    would take from the shared CPU input. The tower computes on the batch
    staged at the previous step, while `put_op` takes the next batch from
    the input and copies it to the device: on a GPU the host-to-device copy
    overlaps the compute (tf_cnn_benchmarks' StagingArea). The area lives
    in the session's device memory: each new session needs one `put_op`
    before its first step (`WarmUpHook`), and only runs that also run
    `put_op` (the train op) may fetch the staged tensors, or the next step
    finds the area empty and waits forever.

    Args:
      tensors: list of tensors, e.g. [images, labels] from the iterator.

    Returns:
      staged: list of tensors of the same dtypes and shapes, on the device.
      put_op: the op that stages `tensors`; run it with every step.
    """
    # Stage and Unstage find their area on the device by its unique name.
    with tf.name_scope("staging_area") as shared_name:
        put_op = tf.raw_ops.Stage(
            values=tensors, shared_name=shared_name, name="put"
        )
        staged = tf.raw_ops.Unstage(
            dtypes=[t.dtype for t in tensors],
            shared_name=shared_name,
            name="get",
        )
    for tensor, each in zip(tensors, staged):
        each.set_shape(tensor.shape)
    return list(staged), put_op


class WarmUpHook(tf.compat.v1.train.SessionRunHook):
    """Runs ops once in every new session, before its first step.

    E.g. the first `put_op` of `stage_on_device`. A resumed run makes a new
    session, so it stages its first batch again.
    """

    def __init__(self, ops):
        self._ops = ops

    def after_create_session(self, session, coord):
        session.run(self._ops)


def average_gradients(tower_grads, device=VARIABLE_DEVICE):
    """Averages each variable's gradient over the towers.

    This is the synchronisation point of the towers: no variable is updated
    before every tower has computed its gradients.

    Args:
      tower_grads: list (one per tower) of lists of (gradient, variable),
        all in the same variable order.
      device: str, where to average: the variables' device.

    Returns:
      A list of (gradient, variable), the gradient the mean over the towers;
      a variable that no tower has a gradient for keeps None.
    """
    average_grads = []
    with tf.device(device):
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
        self.runs = 0

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.step = session.run(self._global_step)
        print(
            "%s: training from step %d" % (datetime.datetime.now(), self.step)
        )
        self._start_time = time.time()
        self._runs_at_start = self.runs

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        self.step += 1
        self.runs += 1
        if (self.runs - self._runs_at_start) % self._log_frequency == 0:
            now = time.time()
            sec_per_batch = (now - self._start_time) / self._log_frequency
            self._start_time = now
            # In a cluster other workers move the global step too.
            self.step = run_context.session.run(self._global_step)
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
    task=None,
    hooks=(),
):
    """Runs the train op until max_steps or the end of the input.

    A `MonitoredSession` restores the newest checkpoint of train_dir that
    reads (`newest_valid_checkpoint`, so a restart resumes), saves one every
    save_checkpoint_steps and at the end, and writes summaries and the step
    logger's line. In a cluster it runs on the worker's server; only the
    chief initialises, restores, checkpoints and writes summaries.

    Args:
      train_op: the op of one training step.
      loss: float32 scalar, logged and checked for NaN every step.
      train_dir: str, checkpoints and event files.
      examples_per_step: int, examples of all towers per step.
      log_frequency: int, steps between log lines.
      max_steps: int or None; None trains until the input ends.
      save_checkpoint_steps: int, steps between checkpoints.
      save_summaries_steps: int, steps between summaries; None writes no
        summaries at all (not even the step counter's global_step/sec).
      summary_op: the summary op to write, default all summaries.
      config: the session's `ConfigProto`.
      clear_train_dir: bool, delete train_dir first instead of resuming.
      task: a worker's `ClusterTask`, or None to train in this process.
      hooks: more `SessionRunHook`s, e.g. from `sync_hooks`.

    Returns:
      int, the steps this process ran (a resumed run counts its own).

    Raises:
      TrainingError: the loss became NaN, or a summarised tensor NaN or
        infinite (no checkpoint of that step is written); a checkpoint could
        not be written (e.g. the disk is full); no checkpoint of train_dir
        reads; the cluster was lost.
    """
    task = task or LOCAL_TASK
    config = task_config(config, task)
    if clear_train_dir and task.is_chief and os.path.isdir(train_dir):
        shutil.rmtree(train_dir)
    logger = StepLoggerHook(loss, examples_per_step, log_frequency)
    # The logger runs first, so its step is the step that made the NaN; the
    # NaN hook runs before the checkpoint saver, so that step is never saved.
    hooks = [logger, tf.compat.v1.train.NanTensorHook(loss), *hooks]
    if max_steps is not None:
        hooks.append(tf.compat.v1.train.StopAtStepHook(last_step=max_steps))
    scaffold = tf.compat.v1.train.Scaffold(summary_op=summary_op)
    saves = _SaveWatcher()
    if task.is_chief:
        hooks += _chief_hooks(
            train_dir,
            scaffold,
            save_checkpoint_steps,
            save_summaries_steps,
            saves,
        )
    server = _start_server(task, config)
    done_ops = _done_signals(task)
    try:
        with _PsWatchdog(task, _timeout_secs(config)):
            _train_loop(
                train_op,
                hooks,
                _session_creator(task, server, scaffold, config, train_dir),
            )
            if server:
                _report_done(server, done_ops, task, logger.runs, config)
    except tf.compat.v1.train.NanLossDuringTrainingError as e:
        raise _diverged(logger.step, "loss is NaN", train_dir) from e
    except tf.errors.InvalidArgumentError as e:
        # On a summary step a NaN or infinite histogram fails the step
        # before the NaN hook sees the loss.
        found = _NON_FINITE_HISTOGRAM.search(e.message)
        if found is None:
            raise
        raise _diverged(logger.step + 1, found.group(0), train_dir) from e
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
        raise TrainingError(
            "lost the cluster after %d local steps (%s): %s"
            % (logger.runs, type(e).__name__, unreachable_tasks(task.cluster))
        ) from e
    except tf.errors.OpError as e:
        if saves.step is None:
            raise
        raise _save_failed(saves.step, train_dir, e) from e
    return logger.runs


def _train_loop(train_op, hooks, session_creator):
    """Runs train_op until a hook asks to stop or the input ends."""
    with tf.compat.v1.train.MonitoredSession(
        session_creator=session_creator,
        hooks=hooks,
        # A sync chief's queue runner waits for gradients that no worker
        # sends after the last step; do not wait for it.
        stop_grace_period_secs=STOP_GRACE_PERIOD_SECS,
    ) as sess:
        while not sess.should_stop():
            sess.run(train_op)


def _chief_hooks(
    train_dir, scaffold, save_checkpoint_steps, save_summaries_steps, saves
):
    """The chief's step counter, summary writer and checkpoint saver.

    The saver tells `saves` (a `_SaveWatcher`) when it writes.
    """
    hooks = []
    if save_summaries_steps is not None:
        hooks += [
            tf.compat.v1.train.StepCounterHook(
                every_n_steps=save_summaries_steps, output_dir=train_dir
            ),
            tf.compat.v1.train.SummarySaverHook(
                save_steps=save_summaries_steps,
                output_dir=train_dir,
                scaffold=scaffold,
            ),
        ]
    hooks.append(
        tf.compat.v1.train.CheckpointSaverHook(
            train_dir,
            save_steps=save_checkpoint_steps,
            scaffold=scaffold,
            checkpoint_basename=CHECKPOINT_BASENAME,
            listeners=[saves],
        )
    )
    return hooks


class _SaveWatcher(tf.compat.v1.train.CheckpointSaverListener):
    """Knows the step of the checkpoint being written, if any.

    An error raised while `step` is set comes from writing that checkpoint.
    """

    def __init__(self):
        self.step = None

    def before_save(self, session, global_step_value):
        self.step = global_step_value

    def after_save(self, session, global_step_value):
        self.step = None


# The operating system's reason at the end of a file error, e.g. '...; No
# space left on device' or '...; File too large'.
_OS_REASON = re.compile(r"; ([A-Z][a-z]+(?: [a-z]+)*)$", re.MULTILINE)


def _save_failed(step, train_dir, error):
    # A failed save leaves its partial files in PREFIX-STEP_temp (the
    # saver's sharded layout); they take the space a retry needs.
    shutil.rmtree(
        os.path.join(train_dir, "%s-%d_temp" % (CHECKPOINT_BASENAME, step)),
        ignore_errors=True,
    )
    found = _OS_REASON.search(error.message)
    reason = found.group(1) if found else error.message.strip().split("\n")[0]
    return TrainingError(
        "could not write the checkpoint of step %d to %s (%s: %s); the "
        "newest complete checkpoint is %s, and a run started once the cause "
        "is fixed resumes from it"
        % (
            step,
            train_dir,
            type(error).__name__,
            reason,
            tf.train.latest_checkpoint(train_dir),
        )
    )


def _session_creator(task, server, scaffold, config, train_dir):
    """The chief restores or initialises; other workers wait for it."""
    if task.is_chief:
        creator = _ResumingSessionCreator(
            scaffold, server.target if server else "", config, train_dir
        )
    else:
        creator = PromptWorkerSessionCreator(scaffold, server.target, config)
    return _BoundedSessionCreator(creator, _timeout_secs(config))


class _ResumingSessionCreator(tf.compat.v1.train.SessionCreator):
    """The chief's session, restored from `newest_valid_checkpoint`.

    The checkpoint is chosen whenever a session is made, so that a session
    made again after a lost peer resumes from the newest one.
    """

    def __init__(self, scaffold, master, config, train_dir):
        self._scaffold = scaffold
        self._master = master
        self._config = config
        self._train_dir = train_dir

    def create_session(self):
        checkpoint = newest_valid_checkpoint(self._train_dir)
        session = tf.compat.v1.train.ChiefSessionCreator(
            self._scaffold,
            self._master,
            self._config,
            checkpoint_filename_with_path=checkpoint,
        ).create_session()
        state = _checkpoint_state(self._train_dir)
        if state is not None:
            # As TensorFlow's restore from a folder does, so that the saver
            # goes on deleting the oldest listed checkpoints (max_to_keep).
            self._scaffold.saver.recover_last_checkpoints(
                state.all_model_checkpoint_paths
            )
        return session


# A checkpoint's index file: PREFIX-STEP.index, e.g. model.ckpt-1000.index.
_CHECKPOINT_INDEX = re.compile(r"^(.+-([0-9]+))\.index$")


def newest_valid_checkpoint(checkpoint_dir):
    """Returns the newest checkpoint of checkpoint_dir that reads in full.

    TensorFlow itself restores the checkpoint that the `checkpoint` state
    file names: if that checkpoint's files are gone or damaged the restore
    fails, and if the state file is garbage training starts again from step
    0 without a word. Here the named checkpoint is tried first, then every
    PREFIX-STEP checkpoint of the folder, highest step first. Each is read
    in full (every tensor, checksums checked); one that does not read is
    skipped with a warning naming it and why.

    Args:
      checkpoint_dir: str, the folder of the checkpoints (--train_dir).

    Returns:
      str, the checkpoint's path prefix, e.g. '/tmp/train/model.ckpt-1000';
      None when the folder holds no checkpoint at all.

    Raises:
      TrainingError: the folder holds checkpoints, but none of them reads.
    """
    candidates = _checkpoint_candidates(checkpoint_dir)
    for checkpoint in candidates:
        error = _read_error(checkpoint)
        if error is None:
            return checkpoint
        print(
            "WARNING: skipping checkpoint %s, it does not read (%s)"
            % (checkpoint, error),
            file=sys.stderr,
            flush=True,
        )
    if candidates:
        raise TrainingError(
            "none of the %d checkpoint(s) in %s reads (the newest is %s); "
            "move them away to train from step 0"
            % (len(candidates), checkpoint_dir, candidates[0])
        )
    return None


def _checkpoint_state(checkpoint_dir):
    """The `CheckpointState` of the folder, None if missing or garbage."""
    try:
        return tf.train.get_checkpoint_state(checkpoint_dir)
    except ValueError:
        # TensorFlow returns None for a file it cannot parse, but raises
        # for an empty one or one of bytes that are not text.
        return None


def _checkpoint_candidates(checkpoint_dir):
    """The checkpoint the state file names, then the others, newest first."""
    state = _checkpoint_state(checkpoint_dir)
    named = [state.model_checkpoint_path] if state else []
    state_file = os.path.join(checkpoint_dir, "checkpoint")
    if not named and os.path.exists(state_file):
        print(
            "WARNING: %s names no checkpoint; looking for the newest one"
            % state_file,
            file=sys.stderr,
        )
    found = []
    if os.path.isdir(checkpoint_dir):
        for name in os.listdir(checkpoint_dir):
            match = _CHECKPOINT_INDEX.match(name)
            if match:
                path = os.path.join(checkpoint_dir, match.group(1))
                found.append((int(match.group(2)), path))
    named_paths = {os.path.abspath(p) for p in named}
    return named + [
        path
        for _, path in sorted(found, reverse=True)
        if os.path.abspath(path) not in named_paths
    ]


def _read_error(checkpoint):
    """Why the checkpoint does not read in full; None when it does."""
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as e:
        # A short data file raises IndexError ('Read less bytes than
        # requested'); the others raise TensorFlow errors.
        return "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0])
    return None


class PromptWorkerSessionCreator(tf.compat.v1.train.SessionCreator):
    """Waits for the chief to initialise the model, checking every second.

    TensorFlow's own worker creator checks every 30 seconds, which makes a
    short run start long after the chief.
    """

    def __init__(self, scaffold, master, config):
        self._scaffold = scaffold
        self._master = master
        self._config = config

    def create_session(self):
        self._scaffold.finalize()
        manager = tf.compat.v1.train.SessionManager(
            local_init_op=self._scaffold.local_init_op,
            ready_op=self._scaffold.ready_op,
            ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
            graph=tf.compat.v1.get_default_graph(),
            recovery_wait_secs=1,
        )
        return manager.wait_for_session(
            self._master, self._config, _timeout_secs(self._config)
        )


class _BoundedSessionCreator(tf.compat.v1.train.SessionCreator):
    """Creates the one session of a run, waiting at most the timeout.

    A `MonitoredSession` re-creates its session, forever, whenever a peer is
    unavailable (TF1's recovery from a restarted ps). Here a lost peer ends
    the run instead, with an error: the first session may wait for the
    cluster to come up for at most timeout_secs; a second one is refused.
    Restarting the task resumes from the chief's newest checkpoint.
    """

    def __init__(self, creator, timeout_secs):
        self._creator = creator
        self._timeout_secs = timeout_secs
        self._created = False

    def create_session(self):
        if self._created:
            # Not UnavailableError: the MonitoredSession would retry it.
            raise tf.errors.DeadlineExceededError(
                None, None, "a cluster peer was lost during the run"
            )
        deadline = time.time() + self._timeout_secs
        while True:
            try:
                session = self._creator.create_session()
                self._created = True
                return session
            except (tf.errors.UnavailableError, tf.errors.AbortedError) as e:
                if time.time() > deadline:
                    raise tf.errors.DeadlineExceededError(
                        None,
                        None,
                        "no session after %d s: %s"
                        % (self._timeout_secs, e.message),
                    ) from e
                time.sleep(1)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss diverged)."""


# TensorFlow's error for a histogram summary of NaN or infinite values.
_NON_FINITE_HISTOGRAM = re.compile(
    r"(Nan|Infinity) in (summary )?histogram for: \S+", re.IGNORECASE
)


def _diverged(step, reason, train_dir):
    return TrainingError(
        "the model diverged at step %d (%s); stopped without saving it, the "
        "newest checkpoint is %s"
        % (step, reason, tf.train.latest_checkpoint(train_dir))
    )


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


# Beyond one machine: between-graph replication on TensorFlow's gRPC runtime.
# Every task runs this same script; `ps` tasks hold the variables, `worker`
# tasks build the towers and train, worker 0 is the chief.


class ClusterTask(
    collections.namedtuple(
        "ClusterTask",
        "cluster job_name task_index sync_replicas replicas_to_aggregate",
    )
):
    """This process's place in the cluster (cluster None: no cluster)."""

    @property
    def is_chief(self):
        return self.job_name == "worker" and self.task_index == 0

    @property
    def replicas_per_step(self):
        """Worker batches that make one global step."""
        return self.replicas_to_aggregate if self.sync_replicas else 1

    @property
    def num_workers(self):
        return self.cluster.num_tasks("worker") if self.cluster else 1


LOCAL_TASK = ClusterTask(None, "worker", 0, False, 1)


def define_cluster_flags():
    """Defines the cluster-mode flags of a trainer; call it at its top.

    The flags are written once here for both multi-GPU trainers: the
    trainer's `main` passes them to `cluster_task_from_flags`.
    """
    flags.DEFINE_string(
        "ps_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the ps tasks.",
    )
    flags.DEFINE_string(
        "worker_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the worker tasks; worker "
        "0 is the chief (initialises, checkpoints, writes summaries).",
    )
    flags.DEFINE_string("job_name", "", "Cluster mode: 'ps' or 'worker'.")
    flags.DEFINE_integer("task_index", 0, "Cluster mode: index within the job.")
    flags.DEFINE_boolean(
        "sync_replicas",
        False,
        "Cluster mode: every step averages the gradients of the workers "
        "(SyncReplicasOptimizer) instead of each worker updating on its own.",
    )
    flags.DEFINE_integer(
        "replicas_to_aggregate",
        0,
        "Cluster mode with --sync_replicas: gradients per step; 0 = one per "
        "worker.",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "operation_timeout_secs",
        120,
        "Cluster mode: an operation waiting longer than this (e.g. on a dead "
        "peer) ends the run with an error; 0 waits forever.",
        lower_bound=0,
    )


def cluster_task_from_flags(flag_values):
    """The `cluster_task` of the flags of `define_cluster_flags`.

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`, passed by its
        `main`.

    Returns:
      A `ClusterTask`, as `cluster_task` returns it.
    """
    return cluster_task(
        flag_values.ps_hosts,
        flag_values.worker_hosts,
        flag_values.job_name,
        flag_values.task_index,
        flag_values.sync_replicas,
        flag_values.replicas_to_aggregate,
    )


def define_device_flags():
    """Defines a multi-tower trainer's device and speed flags.

    --variable_device, --xla and --prefetch_to_device, written once for the
    multi-GPU trainers: the trainer's `main` reads them and passes them to
    `variable_device`, `build_towers` and `stage_on_device`.
    """
    flags.DEFINE_enum(
        "variable_device",
        "cpu",
        list(VARIABLE_DEVICE_CHOICES),
        "Where the variables live and the towers' gradients are averaged: "
        "'cpu' (the TF1 design, /cpu:0) or 'tower' (alias 'gpu': the first "
        "tower's device, e.g. /gpu:0, for GPUs linked peer to peer). With "
        "--cpu_towers the first tower is /cpu:0, so both are the same. Not "
        "in cluster mode, where the variables live on the ps tasks.",
    )
    flags.DEFINE_boolean(
        "xla",
        False,
        "Compile each tower (forward and backward) with XLA, through "
        "tf.xla.experimental.jit_scope (no TF_XLA_FLAGS needed). Meant for "
        "GPUs: on a CPU the step is the same but slower.",
    )
    flags.DEFINE_boolean(
        "prefetch_to_device",
        PREFETCH_TO_DEVICE_DEFAULT,
        "Stage each tower's next batch on its device while the current step "
        "computes (a StagingArea per tower), so that the input copy overlaps "
        "the compute; --noprefetch_to_device reads the batch in the step.",
    )


def _parse_hosts(flag, hosts):
    """Splits 'h1:p1,h2:p2' and checks each HOST:PORT."""
    parsed = [h.strip() for h in hosts.split(",") if h.strip()]
    for host in parsed:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                "--%s: %r has no port; expected HOST:PORT, e.g. "
                "localhost:2222" % (flag, host)
            )
    if not parsed:
        raise ValueError("--%s is empty; expected HOST:PORT,..." % flag)
    return parsed


def cluster_task(
    ps_hosts,
    worker_hosts,
    job_name,
    task_index,
    sync_replicas=False,
    replicas_to_aggregate=0,
):
    """Validates the cluster flags.

    Args:
      ps_hosts, worker_hosts: str, comma-separated HOST:PORT lists; both
        empty means no cluster.
      job_name: 'ps' or 'worker'.
      task_index: int, this task's index in its job.
      sync_replicas: bool, aggregate the workers' gradients every step.
      replicas_to_aggregate: int, gradients per step in sync mode; 0 for
        one from every worker.

    Returns:
      A `ClusterTask`; `LOCAL_TASK` when no hosts are given.

    Raises:
      ValueError: a bad job name, host list or task index.
    """
    if not ps_hosts and not worker_hosts:
        return LOCAL_TASK
    cluster = tf.train.ClusterSpec(
        {
            "ps": _parse_hosts("ps_hosts", ps_hosts),
            "worker": _parse_hosts("worker_hosts", worker_hosts),
        }
    )
    if job_name not in ("ps", "worker"):
        raise ValueError(
            "--job_name must be 'ps' or 'worker', got %r" % job_name
        )
    num_tasks = cluster.num_tasks(job_name)
    if not 0 <= task_index < num_tasks:
        raise ValueError(
            "--task_index=%d is out of range: --%s_hosts lists %d task(s), "
            "so 0..%d" % (task_index, job_name, num_tasks, num_tasks - 1)
        )
    for address in cluster.job_tasks("ps") + cluster.job_tasks("worker"):
        if not _is_private(address.rpartition(":")[0]):
            print(
                "WARNING: %s is not a loopback or private address. The "
                "TensorFlow server has no authentication and runs any graph "
                "sent to it: keep the cluster on a trusted network." % address,
                file=sys.stderr,
            )
    num_workers = cluster.num_tasks("worker")
    return ClusterTask(
        cluster,
        job_name,
        task_index,
        sync_replicas,
        replicas_to_aggregate or num_workers,
    )


def _is_private(host):
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def _timeout_secs(config):
    timeout_ms = config.operation_timeout_in_ms if config else 0
    return timeout_ms / 1000 if timeout_ms > 0 else 7200


def device_setter(task):
    """The device function of a task's graph (None when not in a cluster).

    Variables go to the ps tasks in turn; every other op to this worker,
    keeping the tower device ('/gpu:1', '/cpu:1') given inside it.
    """
    if task.cluster is None:
        return None
    return tf.compat.v1.train.replica_device_setter(
        worker_device="/job:worker/task:%d" % task.task_index,
        cluster=task.cluster,
    )


def sync_optimizer(opt, task):
    """Wraps opt so that each step averages the gradients of all workers.

    Returns opt itself unless the task is a worker in sync mode.
    """
    if task.cluster is None or not task.sync_replicas:
        return opt
    return tf.compat.v1.train.SyncReplicasOptimizer(
        opt,
        replicas_to_aggregate=task.replicas_to_aggregate,
        total_num_replicas=task.num_workers,
    )


def sync_hooks(opt, task):
    """The session hooks a `SyncReplicasOptimizer` needs on every worker.

    Call it after `opt.apply_gradients`. Returns [] for other optimizers.
    """
    if not isinstance(opt, tf.compat.v1.train.SyncReplicasOptimizer):
        return []
    return [
        opt.make_session_run_hook(task.is_chief),
        _ReleaseWorkersHook(opt.get_init_tokens_op(task.num_workers)),
    ]


class _ReleaseWorkersHook(tf.compat.v1.train.SessionRunHook):
    """At its end, a worker puts one token per worker in the token queue.

    A worker that took more than its share of tokens can reach the last
    step while another still waits for a token that no step will make; the
    tokens let that worker's step end, see the last step and stop.
    """

    def __init__(self, tokens_op):
        self._tokens_op = tokens_op

    def end(self, session):
        session.run(self._tokens_op)


def task_config(config, task):
    """The session config of a task: it talks to the ps tasks and itself.

    Without these device filters a worker's session would wait for every
    other worker to be up, and fail when any of them goes away.
    """
    if task.cluster is None:
        return config
    config = copy.deepcopy(config)
    config.device_filters.extend(
        ["/job:ps", "/job:%s/task:%d" % (task.job_name, task.task_index)]
    )
    return config


def _start_server(task, config):
    if task.cluster is None:
        return None
    return tf.distribute.Server(
        task.cluster, task.job_name, task.task_index, config=config
    )


def _done_signals(task):
    """One queue per ps task into which each worker puts a token at its end.

    Returns the enqueue ops of this worker (an empty list outside a cluster).
    """
    if task.cluster is None:
        return []
    ops = []
    for i in range(task.cluster.num_tasks("ps")):
        with tf.device("/job:ps/task:%d" % i):
            queue = tf.queue.FIFOQueue(
                task.num_workers,
                tf.int32,
                shapes=[[]],
                shared_name="done_queue%d" % i,
            )
            if task.job_name == "worker":
                ops.append(queue.enqueue(task.task_index))
            else:
                ops.append(queue.dequeue_many(task.num_workers))
    return ops


def _report_done(server, done_ops, task, runs, config):
    with tf.compat.v1.Session(server.target, config=config) as sess:
        global_step = sess.run(tf.compat.v1.train.get_global_step())
        sess.run(done_ops)
    print(
        "Worker task %d ran %d local steps; global step %d."
        % (task.task_index, runs, global_step),
        flush=True,
    )


def run_ps(task, config):
    """Serves the variables of a ps task until every worker has finished."""
    config = task_config(config, task)
    # No operation timeout here: a ps waits as long as training lasts.
    config.operation_timeout_in_ms = 0
    server = _start_server(task, config)
    print("ps task %d serving at %s" % (task.task_index, server.target))
    with tf.Graph().as_default():
        dequeue = _done_signals(task)[task.task_index]
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(dequeue)
    print(
        "ps task %d: all %d workers done." % (task.task_index, task.num_workers)
    )


class _PsWatchdog:
    """Ends the process when a ps task stops answering for timeout_secs.

    After a ps dies, TensorFlow's own recovery closes the session, and that
    close can wait forever for the dead ps. A ps answers until every worker
    is done, so a silent ps is a lost cluster: say so, and exit 1.
    """

    def __init__(self, task, timeout_secs):
        self._task = task
        self._timeout_secs = timeout_secs
        self._stop = threading.Event()

    def __enter__(self):
        if self._task.cluster is not None:
            threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()

    def _watch(self):
        silent_since = None
        ps = tf.train.ClusterSpec({"ps": self._task.cluster.job_tasks("ps")})
        while not self._stop.wait(WATCHDOG_INTERVAL_SECS):
            lost = unreachable_tasks(ps)
            if not lost.startswith("unreachable"):
                silent_since = None
                continue
            silent_since = silent_since or time.time()
            if time.time() - silent_since >= self._timeout_secs:
                print(
                    "%s: error: lost the cluster: %s"
                    % (os.path.basename(sys.argv[0]), lost),
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(1)


def unreachable_tasks(cluster):
    """Names the tasks of the cluster whose port does not answer.

    Returns:
      str, e.g. 'unreachable: worker task 1 (localhost:2224)', or a note
      that every task answered.
    """
    if cluster is None:
        return "not in a cluster"
    lost = []
    for job in cluster.jobs:
        for index, address in enumerate(cluster.job_tasks(job)):
            host, _, port = address.rpartition(":")
            try:
                socket.create_connection(
                    (host.strip("[]"), int(port)), 2
                ).close()
            except OSError:
                lost.append("%s task %d (%s)" % (job, index, address))
    if not lost:
        return "every task answers; a peer may be stuck or too slow"
    return "unreachable: " + ", ".join(lost)
