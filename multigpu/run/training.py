"""The training loop: a `MonitoredSession` and its hooks (progress, saves)."""

import os
import re
import shutil
from typing import NamedTuple

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import cluster, watchdog
from multigpu.graph import blocks
from multigpu.run import (
    checkpoints,
    event_files,
    interrupts,
    loop_hooks,
    sessions,
    train_dirs,
)

# Seconds a finished session waits for its background threads.
STOP_GRACE_PERIOD_SECS = 5


def run_training(
    train_op,
    loss,
    train_dir,
    examples_per_step,
    log_frequency,
    max_steps=None,
    save_checkpoint_steps=1000,
    save_summaries_steps=0,
    summary_op=None,
    config=None,
    clear_train_dir=False,
    data_dirs=(),
    task=None,
    hooks=(),
    pretrained=("", False),
    model_name=None,
):
    """Runs the train op until max_steps or the end of the input.

    A `MonitoredSession` resumes from the newest checkpoint of train_dir
    that reads and logs, checks and saves as `_session_hooks` and
    `_chief_hooks` say; in a cluster it runs on the worker's server. A run
    that fails before its first step leaves train_dir as it was found.

    Args:
      train_op, loss: the op of one step; its float32 scalar loss.
      train_dir: str, checkpoints and event files.
      examples_per_step, log_frequency: ints, examples of all towers per
        step; steps between log lines.
      max_steps: int, or None to train until the input ends.
      save_checkpoint_steps, save_summaries_steps, summary_op: `_chief_hooks`.
      config: the session's `ConfigProto`.
      clear_train_dir, data_dirs, model_name: `_prepare`.
      task: a worker's `cluster.ClusterTask`, or None to train in this process.
      hooks: more `SessionRunHook`s, e.g. from `cluster.sync_hooks`.
      pretrained: (str, bool), --pretrained_model_checkpoint_path and
        --fine_tune: with no checkpoint in train_dir, start from that
        checkpoint's weights (`restore.warm_start`).

    Returns:
      int, the steps this process ran (a resumed run counts its own).

    Raises:
      errors.Interrupted, errors.TrainingError: `_failure`.
    """
    task = task or cluster.LOCAL_TASK
    config = cluster.task_config(config, task)
    watched = _watched(loss, examples_per_step, log_frequency, train_dir)
    scaffold = _scaffold(summary_op)
    hooks = _session_hooks(watched, loss, hooks, max_steps)
    if task.is_chief:
        saving = (save_checkpoint_steps, save_summaries_steps, max_steps)
        hooks += _chief_hooks(train_dir, scaffold, saving, watched)
    session = _Session(task, config, scaffold, hooks, pretrained)
    start = _Start(clear_train_dir, data_dirs, model_name, max_steps)
    _run_or_put_back(train_op, train_dir, session, start, watched)
    return watched.logger.runs


class _Watched(NamedTuple):
    """The hooks whose state the run reads once its session has ended."""

    logger: loop_hooks.StepLoggerHook  # the steps run, the step reached
    interrupt: interrupts.InterruptHook  # the signal that stopped the run
    saves: loop_hooks.SaveWatcher  # the step of the checkpoint being saved
    events: event_files.EventFileHook  # the event file, to cut back


def _watched(loss, examples_per_step, log_frequency, train_dir):
    """The step logger, the signal handler, the save and event watchers."""
    return _Watched(
        loop_hooks.StepLoggerHook(loss, examples_per_step, log_frequency),
        interrupts.InterruptHook(),
        loop_hooks.SaveWatcher(train_dir),
        event_files.EventFileHook(train_dir),
    )


def _scaffold(summary_op):
    """The session's scaffold: summary_op (None: all), the pruning saver."""
    # TensorFlow's default saver, but for how it prunes and the names of the
    # variables kept in a block (`checkpoints.saved_name`).
    with tf.name_scope(blocks.SESSION + "/"):
        saver = checkpoints.ExactSaver(
            checkpoints.saved_variables(), sharded=True, allow_empty=True
        )
    return tf.compat.v1.train.Scaffold(summary_op=summary_op, saver=saver)


def _session_hooks(watched, loss, hooks, max_steps):
    """Every task's hooks: the logger, the NaN check, the signal handler,
    hooks, and the stop at max_steps (unless None)."""
    # The logger runs first, so its step is the step that made the NaN; the
    # NaN hook runs before the checkpoint saver, so that step is never saved.
    hooks = [
        watched.logger,
        tf.compat.v1.train.NanTensorHook(loss),
        watched.interrupt,
        *hooks,
    ]
    if max_steps is not None:
        hooks.append(tf.compat.v1.train.StopAtStepHook(last_step=max_steps))
    return hooks


class _Session(NamedTuple):
    """What the `MonitoredSession` is made of."""

    task: cluster.ClusterTask
    config: tf.compat.v1.ConfigProto
    scaffold: tf.compat.v1.train.Scaffold
    hooks: list
    pretrained: tuple  # (str, bool): `restore.warm_start`'s arguments


class _Start(NamedTuple):
    """How train_dir is prepared before the first step (`_prepare`)."""

    clear_train_dir: bool
    data_dirs: tuple | list
    model_name: str | None
    max_steps: int | None


def _run_or_put_back(train_op, train_dir, session, start, watched):
    """Trains; a run failing before its first step puts train_dir back.

    The chief puts back what it found (`train_dirs.put_back`), but for an
    interrupted run, which saved the step it reached.
    """
    task = session.task
    server = cluster.start_server(task, session.config)
    done_ops = cluster.done_signals(task)
    as_found = train_dirs.contents(train_dir)
    try:
        try:
            _train(
                train_op, train_dir, session, server, done_ops, start, watched
            )
        except (tf.errors.OpError, RuntimeError) as e:
            failed, cause = _failure(e, watched, task, train_dir)
            if failed is None:
                raise
            raise failed from cause
    except errors.Interrupted:
        raise
    except BaseException:
        if task.is_chief and watched.logger.runs == 0:
            train_dirs.put_back(train_dir, as_found)
        raise


def _train(train_op, train_dir, session, server, done_ops, start, watched):
    """Trains while the chief owns train_dir and the ps tasks are watched.

    Then a worker tells the ps tasks it is done, and a run a signal stopped
    raises `errors.Interrupted`.
    """
    task, config = session.task, session.config
    with (
        train_dirs.owned(train_dir, task.is_chief),
        watchdog.PsWatchdog(task, sessions.timeout_secs(config)),
    ):
        newest, finished = _prepare(train_dir, task, start)
        if finished:
            return
        creator = sessions.session_creator(
            task,
            server,
            session.scaffold,
            config,
            train_dir,
            session.pretrained,
            newest,
        )
        with watched.interrupt.installed():
            _train_loop(train_op, session.hooks, creator)
        if server:
            cluster.report_done(
                server, done_ops, task, watched.logger.runs, config
            )
        if watched.interrupt.signum is not None:
            raise interrupts.interrupted(
                watched.interrupt, train_dir, task.is_chief
            )


def _prepare(train_dir, task, start):
    """Clears train_dir and records the model in it (the chief), and finds
    the checkpoint to resume from.

    Args:
      train_dir: str.
      task: the `cluster.ClusterTask`.
      start: a `_Start`: clear_train_dir (bool) deletes what the trainers
        wrote in train_dir (`train_dirs.clear`), never in data_dirs (strs,
        the run's data folders); model_name (str or None) is recorded in
        train_dir (`train_dirs.record_model`); max_steps (int or None).

    Returns:
      (str or None, bool): the newest checkpoint that reads (None in a
      cluster: the chief's session finds it), and whether it is at
      max_steps already (`_finished`).
    """
    if start.clear_train_dir and task.is_chief:
        train_dirs.clear(train_dir, start.data_dirs)
    if start.model_name and task.is_chief:
        train_dirs.record_model(train_dir, start.model_name)
    # Read once here: a damaged newest checkpoint is named once.
    newest = None
    if task.cluster is None:
        newest = checkpoints.newest_valid_checkpoint(train_dir)
        if _finished(newest, start.max_steps):
            return newest, True
    if task.is_chief:
        event_files.own_writer(train_dir)
    return newest, False


def _failure(error, watched, task, train_dir):
    """The run's error for an error of its session, or None to raise it.

    Returns:
      (exception or None, exception or None): the error to raise, and its
      cause (None: raised alone). `errors.TrainingError` when the loss
      became NaN, or a summarised tensor NaN or infinite (no checkpoint of
      that step is written); a checkpoint or another file of train_dir
      could not be written (e.g. the disk is full); a tensor did not fit
      in memory; the event file failed; the cluster was lost.
    """
    logger, events = watched.logger, watched.events
    if isinstance(error, tf.compat.v1.train.NanLossDuringTrainingError):
        return _diverged(logger.step, "loss is NaN", train_dir), error
    if isinstance(error, tf.errors.InvalidArgumentError):
        # On a summary step a NaN or infinite histogram fails the step
        # before the NaN hook sees the loss.
        found = _NON_FINITE_HISTOGRAM.search(error.message)
        if found is None:
            return None, None
        return _diverged(logger.step + 1, found.group(0), train_dir), error
    if isinstance(
        error, (tf.errors.DeadlineExceededError, tf.errors.UnavailableError)
    ):
        return _lost_cluster(error, logger.runs, task), error
    events.cut_back()
    if isinstance(error, tf.errors.OpError):
        if watched.saves.step is not None:
            return save_failed(watched.saves.step, train_dir, error), None
        return write_failed(train_dir, error) or out_of_memory(error), None
    failed = events.failure(error)
    if failed is None:
        return None, None
    return errors.TrainingError(
        "%s; stopped at step %d, the newest complete checkpoint is %s"
        % (failed, logger.step, checkpoints.latest_checkpoint(train_dir))
    ), None


def _lost_cluster(error, runs, task):
    return errors.TrainingError(
        "lost the cluster after %d local steps (%s): %s"
        % (runs, type(error).__name__, watchdog.unreachable_tasks(task.cluster))
    )


def _finished(checkpoint, max_steps):
    """Whether checkpoint, train_dir's newest, is at max_steps or past it.

    Such a run says so and trains nothing: without this check the session
    would still train one step, save it and write an event file. Only for a
    run in one process: the workers of a cluster wait for their chief.

    Args:
      checkpoint: str, the newest checkpoint that reads, or None.
      max_steps: int or None.
    """
    if max_steps is None or checkpoint is None:
        return False
    step = checkpoints.global_step(checkpoint)
    if step < max_steps:
        return False
    print(
        "%s is already at step %d, at or past --max_steps=%d; nothing to "
        "train (raise --max_steps to train on)" % (checkpoint, step, max_steps),
        flush=True,
    )
    return True


def _train_loop(train_op, hooks, session_creator):
    """Runs train_op until a hook asks to stop or the input ends."""
    # The ops the session and its hooks add (initialisers, readiness
    # checks, the saver) make the graph's session block.
    with (
        tf.name_scope(blocks.SESSION + "/"),
        tf.compat.v1.train.MonitoredSession(
            session_creator=session_creator,
            hooks=hooks,
            # A sync chief's queue runner waits for gradients that no worker
            # sends after the last step; do not wait for it.
            stop_grace_period_secs=STOP_GRACE_PERIOD_SECS,
        ) as sess,
    ):
        while not sess.should_stop():
            sess.run(train_op)


# Steps between summaries by default, as the tutorial's trainers write them.
SUMMARY_STEPS = 100
# The points a chart of a shorter run has at least, by default.
SUMMARY_POINTS = 20


def summary_steps(max_steps):
    """The default steps between summaries: a short run's charts have 20
    points.

    Args:
      max_steps: int or None, the step the run stops at.

    Returns:
      int, SUMMARY_STEPS, or max_steps / SUMMARY_POINTS when that is less
      (at least 1).
    """
    if max_steps is None:
        return SUMMARY_STEPS
    return max(1, min(SUMMARY_STEPS, max_steps // SUMMARY_POINTS))


def _chief_hooks(train_dir, scaffold, saving, watched):
    """The chief's step counter, summary writer, checkpoint saver and event
    file watcher.

    Args:
      train_dir: str.
      scaffold: the session's `Scaffold`.
      saving: (int, int or None, int or None): save_checkpoint_steps, the
        steps between checkpoints; save_summaries_steps, the steps between
        summaries (also written at the first step and at max_steps; 0 for
        `summary_steps(max_steps)`; None writes no summaries at all, not
        even the step counter's global_step/sec); max_steps.
      watched: the `_Watched` hooks; the saver tells its `saves` when it
        writes.
    """
    save_checkpoint_steps, save_summaries_steps, max_steps = saving
    hooks = []
    if save_summaries_steps == 0:
        save_summaries_steps = summary_steps(max_steps)
    if save_summaries_steps is not None:
        hooks += [
            tf.compat.v1.train.StepCounterHook(
                every_n_steps=save_summaries_steps, output_dir=train_dir
            ),
            loop_hooks.SummarySaverHook(
                last_step=max_steps,
                save_steps=save_summaries_steps,
                output_dir=train_dir,
                scaffold=scaffold,
            ),
        ]
    hooks.append(
        loop_hooks.CheckpointSaverHook(
            train_dir,
            save_steps=save_checkpoint_steps,
            scaffold=scaffold,
            checkpoint_basename=checkpoints.CHECKPOINT_BASENAME,
            listeners=[watched.saves],
        )
    )
    return [*hooks, watched.events]


# A file error of TensorFlow: 'PATH; REASON', e.g. '.../graph.pbtxt.tmpHEX;
# No space left on device' (.tmpHEX: a whole file written, then renamed).
_FILE_ERROR = re.compile(
    r"^(\S+?)(\.tmp[0-9a-f]{32})?; ([A-Z][a-z]+(?: [a-z]+)*)$", re.MULTILINE
)


def save_failed(step, train_dir, error):
    """The run's error when the checkpoint of step could not be written."""
    train_dirs.remove_interrupted_writes(train_dir)
    found = _FILE_ERROR.search(error.message)
    if found and found.group(1).endswith(".meta"):
        # The saver writes the graph last: the checkpoint itself is whole.
        return errors.TrainingError(
            "could not write %s, the graph of the checkpoint of step %d (%s);"
            " the checkpoint itself is complete, and a run started once the "
            "cause is fixed resumes from it"
            % (found.group(1), step, _reason(train_dir, error, found))
        )
    return errors.TrainingError(
        "could not write the checkpoint of step %d to %s (%s); %s"
        % (
            step,
            train_dir,
            _reason(train_dir, error, found),
            _resumes_from(train_dir),
        )
    )


def write_failed(train_dir, error):
    """The run's error when a file of train_dir could not be written.

    Returns:
      `errors.TrainingError`, or None when error is not of such a file.
    """
    found = _FILE_ERROR.search(error.message)
    if found is None or os.path.normpath(
        os.path.dirname(found.group(1))
    ) != os.path.normpath(train_dir):
        return None
    train_dirs.remove_interrupted_writes(train_dir)
    return errors.TrainingError(
        "could not write %s (%s); %s"
        % (
            found.group(1),
            _reason(train_dir, error, found),
            _resumes_from(train_dir),
        )
    )


def _reason(train_dir, error, found):
    """'ResourceExhaustedError: No space left on device; 0.3 MB free on
    its disk'."""
    reason = found.group(3) if found else error.message.strip().split("\n")[0]
    return "%s: %s; %.1f MB free on its disk" % (
        type(error).__name__,
        reason,
        shutil.disk_usage(train_dir).free / 2**20,
    )


# TensorFlow's error for an allocation that does not fit.
_OOM = re.compile(
    r"OOM when allocating tensor with shape\[([0-9,]*)\] and type (\w+) on "
    r"\S*?([A-Z]+:[0-9]+)"
)


def out_of_memory(error):
    """The run's error for a tensor too large for its device, else None."""
    found = _OOM.search(error.message)
    if found is None:
        return None
    return errors.TrainingError(
        "out of memory: a %s tensor of shape [%s] does not fit on %s; lower "
        "--batch_size (examples per tower)"
        % (found.group(2), found.group(1), found.group(3))
    )


def _resumes_from(train_dir):
    newest = checkpoints.latest_checkpoint(train_dir)
    if newest is None:
        return (
            "no checkpoint is complete yet: a run started once the cause is "
            "fixed starts from step 0"
        )
    return (
        "the newest complete checkpoint is %s, and a run started once the "
        "cause is fixed resumes from it" % newest
    )


# TensorFlow's error for a histogram summary of NaN or infinite values.
_NON_FINITE_HISTOGRAM = re.compile(
    r"(Nan|Infinity) in (summary )?histogram for: \S+", re.IGNORECASE
)


def _diverged(step, reason, train_dir):
    return errors.TrainingError(
        "the model diverged at step %d (%s); stopped without saving it, the "
        "newest checkpoint is %s"
        % (step, reason, checkpoints.latest_checkpoint(train_dir))
    )
