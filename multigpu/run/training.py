"""The training loop: a `MonitoredSession` and its hooks (progress, saves)."""

from typing import NamedTuple

import tensorflow as tf

from multigpu.distributed import cluster, sessions
from multigpu.graph import summaries
from multigpu.run import failures, interrupts, loop_hooks
from multigpu.train_dir import (
    checkpoints,
    event_files,
    train_dirs,
)

# Seconds a finished session waits for its background threads.
STOP_GRACE_PERIOD_SECS = 5


class Step(NamedTuple):
    """The step a run trains, as the graph built it."""

    train_op: tf.Operation
    loss: tf.Tensor  # float32 scalar, the step's
    examples_per_step: int  # of all towers
    # string scalar, the merged summaries (`_scaffold`); None for all.
    summary_op: tf.Tensor | None = None
    # More `SessionRunHook`s, e.g. from `cluster.sync_hooks`.
    hooks: tuple | list = ()


class TrainDir(NamedTuple):
    """The run's train_dir and what the chief records in it (`_prepare`)."""

    path: str  # checkpoints and event files
    # The run's data folders, which --clear_train_dir never deletes.
    data_dirs: tuple | list = ()
    model_name: str | None = None  # `train_dirs.record_model`
    data: tuple | None = None  # `train_dirs.record_data`


class Process(NamedTuple):
    """Where this process trains."""

    task: cluster.ClusterTask = cluster.LOCAL_TASK
    config: tf.compat.v1.ConfigProto | None = None  # the session's
    # What the workers of a cluster must share (`agreement.agree`), with
    # the data's record (`train_dirs.with_setting`).
    settings: dict | None = None


# A run in this one process, with the default session config.
ONE_PROCESS = Process()


def run_training(step, schedule, start, train_dir, process=ONE_PROCESS):
    """Runs the train op until --max_steps or the end of the input.

    A `MonitoredSession` from train_dir's newest checkpoint that reads, with
    `_scaffold_and_hooks`' hooks; a run failing before step 1 leaves
    train_dir as found; one a signal stopped raises `errors.Interrupted`,
    one that failed `errors.TrainingError` (`failures.failure`).

    schedule: a `choices.Schedule` (its max_steps None: the input's end;
    its saves, `loop_hooks.chief_hooks`); start: a `choices.Start`
    (`_prepare`; pretrained, a new run's `restore.restore_fn`).

    Returns:
      int, the steps this process ran (a resumed run counts its own).
    """
    task = process.task
    config = cluster.task_config(process.config, task)
    watched = _watched(step, schedule, train_dir.path, task)
    scaffold, hooks, chief_hooks = _scaffold_and_hooks(
        step, schedule, train_dir.path, task, watched
    )
    settings = train_dirs.with_setting(process.settings, train_dir.data)
    session = _Session(
        task, config, scaffold, hooks, chief_hooks, start.pretrained, settings
    )
    done_ops = task.kind.done_signals(task)
    started = task.kind.start(
        task, config, settings, done_ops, watched.interrupt.installed()
    )
    session = session._replace(
        hooks=[*started.hooks, *session.hooks],
        joins_held_job=started.joins_held_job,
        server=started.server,
        done_ops=done_ops,
    )
    prepared = _Start(
        start.clear_train_dir,
        train_dir.data_dirs,
        train_dir.model_name,
        train_dir.data,
        schedule.max_steps,
    )
    _run_or_put_back(step.train_op, train_dir.path, session, prepared, watched)
    return watched.logger.runs


class _Watched(NamedTuple):
    """The hooks whose state the run reads once its session has ended."""

    logger: loop_hooks.StepLoggerHook  # the steps run, the step reached
    interrupt: interrupts.InterruptHook  # the signal that stopped the run
    saves: loop_hooks.SaveWatcher  # the step of the checkpoint being saved
    events: event_files.EventFileHook  # the event file, to cut back
    # The step every worker stopped at after one's signal, where the kind
    # of run agrees on it (`kinds.Kind.agreed_stop`); None elsewhere.
    preemption: interrupts.PreemptionHook | None


def _watched(step, schedule, train_dir, task):
    """The step logger, the signal handlers, the save and event watchers."""
    # Where a signal stops every worker at one step, the hook only takes it.
    interrupt = interrupts.InterruptHook(stops_itself=not task.kind.agreed_stop)
    agreed = None
    if task.kind.agreed_stop:
        agreed = interrupts.PreemptionHook(interrupt)
    logger = loop_hooks.StepLoggerHook(
        step.loss,
        step.examples_per_step,
        schedule.log_frequency,
        schedule.max_steps,
    )
    return _Watched(
        logger,
        interrupt,
        loop_hooks.SaveWatcher(train_dir),
        event_files.EventFileHook(train_dir),
        agreed,
    )


def _scaffold_and_hooks(step, schedule, train_dir, task, watched):
    """The session's scaffold, every task's hooks, and the chief's ([] on
    the other workers): `_scaffold`, `_session_hooks` and
    `loop_hooks.chief_hooks`."""
    scaffold, histograms = _scaffold(step.summary_op)
    hooks = _session_hooks(watched, step, schedule.max_steps, task)
    if not task.is_chief:
        return scaffold, hooks, []
    return (
        scaffold,
        hooks,
        loop_hooks.chief_hooks(
            train_dir, scaffold, schedule, watched, histograms
        ),
    )


def _scaffold(summary_op):
    """The session's scaffold, with the pruning saver, and the histograms.

    Args:
      summary_op: string scalar, the merged summaries; None for all.

    Returns:
      (`Scaffold`, string scalar or None): the scaffold's summary op holds
      all of summary_op but the histograms, which come apart
      (`summaries.split_histograms`).
    """
    # TensorFlow's default saver, but for how it prunes and the names of the
    # variables kept in a block (`checkpoints.saved_name`).
    with tf.name_scope(summaries.SESSION + "/"):
        saver = checkpoints.ExactSaver(
            checkpoints.saved_variables(), sharded=True, allow_empty=True
        )
    summary_op, histograms = summaries.split_histograms(summary_op)
    scaffold = tf.compat.v1.train.Scaffold(summary_op=summary_op, saver=saver)
    return scaffold, histograms


def _session_hooks(watched, step, max_steps, task):
    """Every task's hooks: the finished check of a cluster, the logger, the
    NaN check, the signal handler, the step's hooks, and the stop at
    max_steps (unless None)."""
    finished = task.kind.finished_hooks(max_steps, task)
    # The logger runs first, so its step is the step that made the NaN; the
    # NaN hook runs before the checkpoint saver, so that step is never saved.
    hooks = [
        *finished,
        watched.logger,
        loop_hooks.NanLossHook(step.loss),
        watched.interrupt,
        *([watched.preemption] if watched.preemption else []),
        *step.hooks,
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
    chief_hooks: list  # the chief's savers, left out of a finished run's
    pretrained: tuple  # (str, bool): `restore.warm_start`'s arguments
    settings: dict | None  # what the workers compare (`agreement.agree`)
    # The chief takes the variables the ps tasks hold (`kinds.Started`).
    joins_held_job: bool = False
    server: tf.distribute.Server | None = None  # None in one process
    done_ops: list | tuple = ()  # the worker's `ps.done_signals`


class _Start(NamedTuple):
    """How train_dir is prepared before the first step (`_prepare`):
    `choices.Start`'s clear_train_dir, `TrainDir`'s data_dirs, model_name
    and data, and --max_steps."""

    clear_train_dir: bool
    data_dirs: tuple | list
    model_name: str | None
    data: tuple | None
    max_steps: int | None


def _run_or_put_back(train_op, train_dir, session, start, watched):
    """Trains; a run failing before its first step puts train_dir back.

    The chief puts back what it found (`train_dirs.put_back`), also when a
    signal stopped it before step 1, but not for a train_dir that another
    trainer holds.
    """
    as_found = train_dirs.contents(train_dir)
    try:
        _train(train_op, train_dir, session, start, watched)
    except train_dirs.InUse:
        # A folder in use is another trainer's: its new files are not ours.
        raise
    except BaseException:
        # A run interrupted after step 1 saved the step it reached; one
        # interrupted before it, like one that failed, leaves no trace.
        if session.task.is_chief and watched.logger.runs == 0:
            train_dirs.put_back(train_dir, as_found)
        raise


def _save_reached(error, session, train_dir, watched):
    """The chief's checkpoint of its last step, when a peer is lost after a
    step and the kind of run saves it (`kinds.Kind.lost_peer_save`), else
    None."""
    task = session.task
    if not (
        task.is_chief and watched.logger.runs and failures.lost_cluster(error)
    ):
        return None
    return task.kind.lost_peer_save(
        session.server, session.config, session.scaffold.saver, train_dir
    )


def _train(train_op, train_dir, session, start, watched):
    """Trains while the chief owns train_dir and the ps tasks are watched.

    A failed run says why in one line (`failures.failure`), the chief
    having saved the step it reached first, where the kind of run saves on
    a lost peer: all while it holds train_dir.
    """
    task, config = session.task, session.config
    # A signal from the first write in train_dir on is the run's to handle:
    # one before step 1 leaves train_dir as it was (`_run_or_put_back`).
    with (
        watched.interrupt.installed(),
        train_dirs.owned(train_dir, task.is_chief),
        task.kind.watchdog(task, sessions.timeout_secs(config)),
    ):
        try:
            _train_owned(train_op, train_dir, session, start, watched)
        except (tf.errors.OpError, RuntimeError) as e:
            saved = _save_reached(e, session, train_dir, watched)
            failed, cause = failures.failure(e, watched, task, train_dir, saved)
            if failed is None:
                raise
            raise failed from cause


def _train_owned(train_op, train_dir, session, start, watched):
    """Prepares train_dir and trains; then a worker tells the ps tasks it
    is done, and a run a signal stopped raises `errors.Interrupted`."""
    task, config, server = session.task, session.config, session.server
    newest, finished = _prepare(train_dir, task, start)
    if finished and task.kind.ends_finished(newest, start.max_steps):
        return
    hooks = session.hooks + ([] if finished else session.chief_hooks)
    creator = sessions.session_creator(
        task,
        server,
        session.scaffold,
        config,
        train_dir,
        sessions.ChiefStart(session.pretrained, newest, session.joins_held_job),
    )
    _train_loop(train_op, hooks, creator)
    if server:
        cluster.report_done(
            server,
            session.done_ops,
            task,
            watched.logger.runs,
            config,
            start.max_steps,
        )
    if watched.preemption and watched.preemption.signals:
        raise interrupts.preempted(watched.preemption, train_dir, task.is_chief)
    if watched.interrupt.signum is not None:
        raise interrupts.interrupted(
            watched.interrupt, train_dir, task, watched.logger.runs
        )


def _prepare(train_dir, task, start):
    """Clears train_dir (never its data_dirs) and records the model and
    the data in it (the chief), and finds the checkpoint to resume from.

    Returns:
      (str or None, bool): the chief's newest checkpoint that reads (None
      on the other workers of a cluster), and whether it is at max_steps
      already (`_finished`): then the chief writes nothing, and the kind
      of run says so (`kinds.Kind.ends_finished`).
    """
    if start.clear_train_dir and task.is_chief:
        train_dirs.clear(train_dir, start.data_dirs)
    if start.model_name and task.is_chief:
        train_dirs.record_model(train_dir, start.model_name)
    if start.data and task.is_chief:
        train_dirs.record_data(train_dir, start.data)
    if not task.is_chief:
        return None, False
    # Read once here: a damaged newest checkpoint is named once.
    newest = checkpoints.newest_valid_checkpoint(train_dir)
    if _finished(newest, start.max_steps):
        return newest, True
    # Under the lock, what an earlier run's interrupted saves left (a kill
    # -9 mid-save: model.ckpt-STEP_temp/) is no run's any more.
    train_dirs.remove_interrupted_writes(train_dir)
    event_files.own_writer(train_dir)
    return newest, False


def _finished(checkpoint, max_steps):
    """Whether checkpoint (train_dir's newest, or None) is at max_steps
    (or None) or past it: such a run trains nothing, where the session
    would still train one step, save it and write an event file."""
    if max_steps is None or checkpoint is None:
        return False
    return checkpoints.global_step(checkpoint) >= max_steps


def _train_loop(train_op, hooks, session_creator):
    """Runs train_op until a hook asks to stop or the input ends."""
    # The ops the session and its hooks add (initialisers, readiness
    # checks, the saver) make the graph's session block.
    with (
        tf.name_scope(summaries.SESSION + "/"),
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
