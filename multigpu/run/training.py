"""The training loop: a `MonitoredSession` and its hooks (progress, saves)."""

from typing import NamedTuple

import tensorflow as tf

from multigpu.distributed import cluster, sessions
from multigpu.graph import summaries
from multigpu.run import failures, interrupts, loop_hooks
from multigpu.train_dir import (
    checkpoints,
    event_files,
    lock,
    restore,
    train_dirs,
)

# Seconds a finished session waits for its background threads.
STOP_GRACE_PERIOD_SECS = 5


class Step(NamedTuple):
    """The step a run trains, as the graph built it."""

    train_op: tf.Operation
    loss: tf.Tensor  # float32 scalar
    examples_per_step: int  # of all towers
    summary_op: tf.Tensor | None = None  # string scalar; None for all
    hooks: tuple | list = ()  # e.g. from `cluster.sync_hooks`


class TrainDir(NamedTuple):
    """The run's train_dir and what the chief records in it (`_prepare`)."""

    path: str
    data_dirs: tuple | list = ()  # never deleted by --clear_train_dir
    model_name: str | None = None  # `train_dirs.record_model`
    data: tuple | None = None  # `train_dirs.record_data`


class Process(NamedTuple):
    """Where this process trains."""

    task: cluster.ClusterTask = cluster.LOCAL_TASK
    config: tf.compat.v1.ConfigProto | None = None
    settings: dict | None = None  # what the workers share (`agreement`)


# A run in this one process, with the default session config.
ONE_PROCESS = Process()


def run_training(step, schedule, start, train_dir, process=ONE_PROCESS):
    """Runs the train op until --max_steps or the end of the input.

    A run failing before step 1 leaves train_dir as found; one a signal
    stopped raises `errors.Interrupted`, one that failed
    `errors.TrainingError`. schedule: a `choices.Schedule`; start: a
    `choices.Start`. Returns the steps this process ran (int).
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
    # A signal after the start is held until the loop's handlers are set.
    started = task.kind.start(
        task,
        config,
        settings,
        done_ops,
        watched.interrupt.installed(then_hold=True),
        train_dir.path,
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

    logger: loop_hooks.StepLoggerHook
    interrupt: interrupts.InterruptHook
    saves: loop_hooks.SaveWatcher
    events: event_files.EventFileHook
    # None where the kind of run does not agree on a stop step.
    preemption: interrupts.PreemptionHook | None


def _watched(step, schedule, train_dir, task):
    # Where a signal stops every worker at one step, the hook only takes it.
    interrupt = interrupts.InterruptHook(stops_itself=not task.kind.agreed_stop)
    agreed = None
    if task.kind.agreed_stop:
        agreed = interrupts.PreemptionHook(interrupt)
    logger = loop_hooks.StepLoggerHook(
        step.loss,
        step.examples_per_step,
        schedule,
        task.task_index if task.kind.serves else None,
    )
    return _Watched(
        logger,
        interrupt,
        loop_hooks.SaveWatcher(train_dir),
        event_files.EventFileHook(train_dir),
        agreed,
    )


def _scaffold_and_hooks(step, schedule, train_dir, task, watched):
    """The session's scaffold, every task's hooks, and the chief's."""
    scaffold, histograms = _scaffold(step.summary_op)
    # The logger runs first, so its step is the step that made the NaN; the
    # NaN hook runs before the checkpoint saver, so that step is never saved.
    hooks = [
        *task.kind.finished_hooks(schedule.max_steps, task),
        watched.logger,
        loop_hooks.NanLossHook(step.loss),
        watched.interrupt,
        *([watched.preemption] if watched.preemption else []),
        *step.hooks,
    ]
    if schedule.max_steps is not None:
        hooks.append(
            tf.compat.v1.train.StopAtStepHook(last_step=schedule.max_steps)
        )
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
    """The scaffold, whose summary op is summary_op (string scalar, None
    for all) but the histograms, and the histograms (None if none)."""
    # TensorFlow's default saver, but for how it prunes and the names of the
    # variables kept in a block (`checkpoints.saved_name`).
    with tf.name_scope(summaries.SESSION + "/"):
        saver = checkpoints.ExactSaver(
            checkpoints.saved_variables(), sharded=True, allow_empty=True
        )
    summary_op, histograms = summaries.split_histograms(summary_op)
    scaffold = tf.compat.v1.train.Scaffold(summary_op=summary_op, saver=saver)
    return scaffold, histograms


class _Session(NamedTuple):
    """What the `MonitoredSession` is made of."""

    task: cluster.ClusterTask
    config: tf.compat.v1.ConfigProto
    scaffold: tf.compat.v1.train.Scaffold
    hooks: list
    chief_hooks: list  # left out of a finished run's
    pretrained: restore.Pretrained
    settings: dict | None
    joins_held_job: bool = False  # `kinds.Started`
    server: tf.distribute.Server | None = None  # None in one process
    done_ops: list | tuple = ()


class _Start(NamedTuple):
    """How train_dir is prepared before the first step (`_prepare`)."""

    clear_train_dir: bool
    data_dirs: tuple | list
    model_name: str | None
    data: tuple | None
    max_steps: int | None


def _run_or_put_back(train_op, train_dir, session, start, watched):
    """Trains while the chief owns train_dir and the ps tasks are watched;
    the chief of a run failing or stopped before its first step puts
    train_dir back as it found it under its lock."""
    task = session.task
    found = []  # What the lock's holder found, once it holds it.
    try:
        # A signal from the first write in train_dir on is the run's to
        # handle: one before step 1 leaves train_dir as it was.
        with (
            watched.interrupt.installed(),
            lock.owned(train_dir, task.is_chief) as as_found,
            task.kind.watchdog(task, sessions.timeout_secs(session.config)),
        ):
            found.append(as_found)
            _train(train_op, train_dir, session, start, watched)
    except BaseException:
        # A run interrupted after step 1 saved the step it reached; one
        # interrupted before it, like one that failed, leaves no trace.
        if found and task.is_chief and watched.logger.runs == 0:
            train_dirs.put_back(train_dir, found[0])
        raise


def _train(train_op, train_dir, session, start, watched):
    """Trains; a failure raises one line, after the chief saved what it
    reached."""
    task, config = session.task, session.config
    try:
        _train_owned(train_op, train_dir, session, start, watched)
    except (tf.errors.OpError, RuntimeError) as e:
        saved = None
        # The chief's checkpoint of its last step, when a peer is lost
        # after a step and the kind of run saves it.
        lost = failures.lost_cluster(e)
        if task.is_chief and watched.logger.runs and lost:
            saved = task.kind.lost_peer_save(
                session.server, config, session.scaffold.saver, train_dir
            )
        failed, cause = failures.failure(e, watched, task, train_dir, saved)
        if failed is None:
            raise
        raise failed from cause


def _train_owned(train_op, train_dir, session, start, watched):
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
    # The ops the session and its hooks add (initialisers, readiness
    # checks, the saver) make the graph's session block.
    with (
        tf.name_scope(summaries.SESSION + "/"),
        tf.compat.v1.train.MonitoredSession(
            session_creator=creator,
            hooks=hooks,
            # A sync chief's queue runner waits for gradients that no worker
            # sends after the last step; do not wait for it.
            stop_grace_period_secs=STOP_GRACE_PERIOD_SECS,
        ) as sess,
    ):
        while not sess.should_stop():
            sess.run(train_op)
    if server:
        cluster.report_done(
            server,
            session.done_ops,
            task,
            watched.logger.runs,
            config,
            start.max_steps,
            train_dir,
        )
    if watched.preemption and watched.preemption.signals:
        raise interrupts.preempted(watched.preemption, train_dir, task.is_chief)
    if watched.interrupt.signum is not None:
        raise interrupts.interrupted(
            watched.interrupt, train_dir, task, watched.logger.runs
        )


def _prepare(train_dir, task, start):
    """Clears and records train_dir (the chief), and returns the chief's
    newest checkpoint that reads (None elsewhere) and whether it is at
    max_steps already: then the chief writes nothing."""
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
    # At max_steps or past it, the session itself would still train one
    # step, save it and write events.
    if (
        start.max_steps is not None
        and newest is not None
        and checkpoints.global_step(newest) >= start.max_steps
    ):
        return newest, True
    # Under the lock, what an earlier run's interrupted saves left (a kill
    # -9 mid-save: model.ckpt-STEP_temp/) is no run's any more.
    train_dirs.remove_interrupted_writes(train_dir)
    event_files.own_writer(train_dir)
    return newest, False
