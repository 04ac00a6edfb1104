"""The training loop: a `MonitoredSession` and its hooks (progress, saves)."""

from typing import NamedTuple

import tensorflow as tf

from multigpu.distributed import agreement, cluster, ps_agreement, watchdog
from multigpu.graph import blocks, summaries
from multigpu.run import (
    failures,
    interrupts,
    last_step,
    loop_hooks,
    preemption,
    sessions,
)
from multigpu.train_dir import (
    checkpoints,
    data_records,
    event_files,
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
    settings=None,
    data=None,
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
      clear_train_dir, data_dirs, model_name, data: `_prepare`.
      task, settings: a worker's `cluster.ClusterTask` (None to train in
        this process); what the workers must share (`agreement.agree`),
        with data (`data_records.with_setting`).
      hooks: more `SessionRunHook`s, e.g. from `cluster.sync_hooks`.
      pretrained: (str, bool), --pretrained_model_checkpoint_path and
        --fine_tune, for a train_dir without checkpoints (`restore`).

    Returns:
      int, the steps this process ran (a resumed run counts its own).

    Raises:
      errors.Interrupted, errors.TrainingError: `failures.failure`.
    """
    task = task or cluster.LOCAL_TASK
    config = cluster.task_config(config, task)
    watched = _watched(loss, examples_per_step, log_frequency, train_dir, task)
    scaffold, histograms = _scaffold(summary_op)
    hooks = _session_hooks(watched, loss, hooks, max_steps)
    if task.is_chief:
        saving = (save_checkpoint_steps, save_summaries_steps, max_steps)
        hooks += _chief_hooks(train_dir, scaffold, saving, watched, histograms)
    settings = data_records.with_setting(settings, data)
    session = _Session(task, config, scaffold, hooks, pretrained, settings)
    start = _Start(clear_train_dir, data_dirs, model_name, data, max_steps)
    _run_or_put_back(train_op, train_dir, session, start, watched)
    return watched.logger.runs


class _Watched(NamedTuple):
    """The hooks whose state the run reads once its session has ended."""

    logger: loop_hooks.StepLoggerHook  # the steps run, the step reached
    interrupt: interrupts.InterruptHook  # the signal that stopped the run
    saves: loop_hooks.SaveWatcher  # the step of the checkpoint being saved
    events: event_files.EventFileHook  # the event file, to cut back
    # The step every worker of a cluster of workers only stopped at after
    # one's signal; None elsewhere.
    preemption: preemption.PreemptionHook | None


def _watched(loss, examples_per_step, log_frequency, train_dir, task):
    """The step logger, the signal handlers, the save and event watchers."""
    # In a cluster of workers only a signal stops every worker at one step.
    interrupt = interrupts.InterruptHook(stops_itself=not task.workers_only)
    agreed = None
    if task.workers_only:
        agreed = preemption.PreemptionHook(task, interrupt)
    return _Watched(
        loop_hooks.StepLoggerHook(loss, examples_per_step, log_frequency),
        interrupt,
        loop_hooks.SaveWatcher(train_dir),
        event_files.EventFileHook(train_dir),
        agreed,
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
    with tf.name_scope(blocks.SESSION + "/"):
        saver = checkpoints.ExactSaver(
            checkpoints.saved_variables(), sharded=True, allow_empty=True
        )
    summary_op, histograms = summaries.split_histograms(summary_op)
    scaffold = tf.compat.v1.train.Scaffold(summary_op=summary_op, saver=saver)
    return scaffold, histograms


def _session_hooks(watched, loss, hooks, max_steps):
    """Every task's hooks: the logger, the NaN check, the signal handler,
    hooks, and the stop at max_steps (unless None)."""
    # The logger runs first, so its step is the step that made the NaN; the
    # NaN hook runs before the checkpoint saver, so that step is never saved.
    hooks = [
        watched.logger,
        loop_hooks.NanLossHook(loss),
        watched.interrupt,
        *([watched.preemption] if watched.preemption else []),
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
    settings: dict | None  # what the workers compare (`agreement.agree`)


class _Start(NamedTuple):
    """How train_dir is prepared before the first step (`_prepare`)."""

    clear_train_dir: bool
    data_dirs: tuple | list
    model_name: str | None
    data: data_records.Data | None
    max_steps: int | None


def _run_or_put_back(train_op, train_dir, session, start, watched):
    """Trains; a run failing before its first step puts train_dir back.

    The chief puts back what it found (`train_dirs.put_back`), also when a
    signal stopped it before step 1, but not for a train_dir that another
    trainer holds.
    """
    task = session.task
    server = cluster.start_server(task, session.config)
    done_ops = cluster.done_signals(task)
    if task.workers_only:
        _agree(server, session)
    elif task.cluster is not None:
        session = _with_ps_agreement(session, done_ops)
    as_found = train_dirs.contents(train_dir)
    try:
        try:
            _train(
                train_op, train_dir, session, server, done_ops, start, watched
            )
        except (tf.errors.OpError, RuntimeError) as e:
            saved = _save_reached(e, server, session, train_dir, watched)
            failed, cause = failures.failure(e, watched, task, train_dir, saved)
            if failed is None:
                raise
            raise failed from cause
    except train_dirs.InUse:
        # A folder in use is another trainer's: its new files are not ours.
        raise
    except BaseException:
        # A run interrupted after step 1 saved the step it reached; one
        # interrupted before it, like one that failed, leaves no trace.
        if task.is_chief and watched.logger.runs == 0:
            train_dirs.put_back(train_dir, as_found)
        raise


def _save_reached(error, server, session, train_dir, watched):
    """The chief's checkpoint of its last step, when a cluster of workers
    only is lost after a step (`last_step.save_reached`), else None."""
    task = session.task
    if not (
        task.workers_only
        and task.is_chief
        and watched.logger.runs
        and failures.lost_cluster(error)
    ):
        return None
    return last_step.save_reached(
        server, session.config, session.scaffold.saver, train_dir
    )


def _agree(server, session):
    """Every worker's settings and model variables equal, or an error."""
    agreement.agree(
        server.target,
        session.task,
        _with_variables(session.settings),
        sessions.timeout_secs(session.config),
    )


def _with_ps_agreement(session, done_ops):
    """session, its hooks led by the one that compares a ps cluster
    worker's settings with its chief's before step 1 (`ps_agreement`); a
    worker that differs runs done_ops, the worker's `cluster.done_signals`."""
    agreed = ps_agreement.PsAgreementHook(
        session.task,
        _with_variables(session.settings),
        sessions.timeout_secs(session.config),
        done_ops,
    )
    return session._replace(hooks=[agreed, *session.hooks])


def _with_variables(settings):
    """settings (a dict, or None) and the digest of the model's variables."""
    settings = dict(settings or {})
    settings[agreement.VARIABLES] = agreement.variables_digest(
        tf.compat.v1.global_variables()
    )
    return settings


def _train(train_op, train_dir, session, server, done_ops, start, watched):
    """Trains while the chief owns train_dir and the ps tasks are watched.

    Then a worker tells the ps tasks it is done, and a run a signal stopped
    raises `errors.Interrupted`.
    """
    task, config = session.task, session.config
    # A signal from the first write in train_dir on is the run's to handle:
    # one before step 1 leaves train_dir as it was (`_run_or_put_back`).
    with (
        watched.interrupt.installed(),
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
        _train_loop(train_op, session.hooks, creator)
        if server:
            cluster.report_done(
                server, done_ops, task, watched.logger.runs, config
            )
        if watched.preemption and watched.preemption.signals:
            raise preemption.interrupted(
                watched.preemption, train_dir, task.is_chief
            )
        if watched.interrupt.signum is not None:
            raise interrupts.interrupted(
                watched.interrupt, train_dir, task, watched.logger.runs
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
        train_dir (`train_dirs.record_model`), and so is data (a
        `data_records.Data` or None); max_steps (int or None).

    Returns:
      (str or None, bool): the newest checkpoint that reads (None in a
      cluster: the chief's session finds it), and whether it is at
      max_steps already (`_finished`).
    """
    if start.clear_train_dir and task.is_chief:
        train_dirs.clear(train_dir, start.data_dirs)
    if start.model_name and task.is_chief:
        train_dirs.record_model(train_dir, start.model_name)
    if start.data and task.is_chief:
        data_records.record_data(train_dir, start.data)
    # Read once here: a damaged newest checkpoint is named once.
    newest = None
    if task.cluster is None:
        newest = checkpoints.newest_valid_checkpoint(train_dir)
        if _finished(newest, start.max_steps):
            return newest, True
    if task.is_chief:
        # Under the lock, what an earlier run's interrupted saves left (a
        # kill -9 mid-save: model.ckpt-STEP_temp/) is no run's any more.
        train_dirs.remove_interrupted_writes(train_dir)
        event_files.own_writer(train_dir)
    return newest, False


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


def _chief_hooks(train_dir, scaffold, saving, watched, histograms):
    """The chief's step counter, summary writer, checkpoint saver and event
    file watcher.

    Args:
      train_dir: str.
      scaffold: the session's `Scaffold`.
      saving: (int, int or None, int or None): save_checkpoint_steps, the
        steps between checkpoints; save_summaries_steps, the steps between
        summaries (also written at the first step and at max_steps; 0 for
        `summary_steps(max_steps)`, and the histograms every SUMMARY_STEPS;
        None writes no summaries at all, not even the step counter's
        global_step/sec); max_steps.
      watched: the `_Watched` hooks; the saver tells its `saves` when it
        writes.
      histograms: string scalar, the merged histograms, or None.
    """
    save_checkpoint_steps, save_summaries_steps, max_steps = saving
    hooks = []
    if save_summaries_steps is not None:
        every = save_summaries_steps or summary_steps(max_steps)
        hooks += [
            tf.compat.v1.train.StepCounterHook(
                every_n_steps=every, output_dir=train_dir
            ),
            loop_hooks.SummarySaverHook(
                last_step=max_steps,
                histograms=histograms,
                histogram_steps=save_summaries_steps or SUMMARY_STEPS,
                save_steps=every,
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
