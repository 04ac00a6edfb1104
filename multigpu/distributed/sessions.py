"""Session creators: the chief restores, workers wait, both bounded; the
finished job's check as a worker's session starts.

A cluster of workers only, lost, first saves the chief's last completed step
(`save_reached`). When a peer, or the link to it, is lost, the step in
flight fails in one of its collectives before any saved variable is written
(the update waits for every collective of the step), so the chief's
variables are still those of the last step it completed: it saves them, and
the same commands resume from that step once the cluster is whole again.
Without this a link that goes down costs every step since the last periodic
checkpoint.
"""

import os
import time
from typing import NamedTuple

import tensorflow as tf

from multigpu.distributed import ps
from multigpu.train_dir import checkpoints, restore


class ChiefStart(NamedTuple):
    """How the chief's session starts (`ResumingSessionCreator`)."""

    pretrained: restore.Pretrained = restore.Pretrained()
    newest: str | None = None  # its newest checkpoint, if found already
    joins_held_job: bool = False


FIRST_START = ChiefStart()


def session_creator(
    task, server, scaffold, config, train_dir, start=FIRST_START
):
    """The chief restores or initialises; the other workers make their
    sessions as their kind of run does; none waits past the timeout."""
    target = server.target if server else ""
    chief = None
    if task.is_chief and not start.joins_held_job:
        chief = ResumingSessionCreator(
            scaffold, target, config, train_dir, start.pretrained, start.newest
        )
    creator = task.kind.session(chief, scaffold, target, config, task)
    return BoundedSessionCreator(creator, timeout_secs(config))


class StartUpBoundSessionCreator(tf.compat.v1.train.SessionCreator):
    """A worker's session of a cluster of workers only, made within a bound.

    Its local init op copies the chief's values to every worker by
    collective ops, whose first run waits for every peer with no operation
    timeout: a peer lost then would hold the worker forever.
    """

    def __init__(self, creator, task, timeout_secs):
        self._creator = creator
        self._task = task
        self._timeout_secs = timeout_secs

    def create_session(self):
        with ps.ends_after(
            self._timeout_secs,
            self._task,
            "the start-up copy of the chief's values",
        ):
            return self._creator.create_session()


class ResumingSessionCreator(tf.compat.v1.train.SessionCreator):
    """The chief's session, restored from its newest valid checkpoint, or
    warm started from a pretrained one.

    The checkpoint is chosen whenever a session is made, so that a session
    made again after a lost peer resumes from the newest one. The restore
    runs before the model is ready, so no worker steps on variables not yet
    restored.
    """

    def __init__(
        self, scaffold, master, config, train_dir, pretrained, newest=None
    ):
        self._scaffold = scaffold
        self._master = master
        self._config = config
        self._train_dir = train_dir
        self._pretrained = pretrained
        self._newest = newest

    def create_session(self):
        checkpoint, self._newest = self._newest, None
        if checkpoint is None:
            checkpoint = checkpoints.newest_valid_checkpoint(self._train_dir)
        restore_fn = restore.restore_fn(
            checkpoint, self._pretrained.path, self._pretrained.fine_tune
        )
        if restore_fn is None:
            session = tf.compat.v1.train.ChiefSessionCreator(
                self._scaffold, self._master, self._config
            ).create_session()
        else:
            self._scaffold.finalize()
            session = session_manager(self._scaffold).prepare_session(
                self._master, init_fn=restore_fn, config=self._config
            )
        state = checkpoints.checkpoint_state(self._train_dir)
        if state is not None:
            # As TensorFlow's restore from a folder does, so that the saver
            # goes on deleting the oldest listed checkpoints (max_to_keep).
            self._scaffold.saver.recover_checkpoints(state)
        return session


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
        return session_manager(self._scaffold).wait_for_session(
            self._master,
            self._config,
            timeout_secs(self._config) or float("inf"),
        )


class FinishedHook(tf.compat.v1.train.SessionRunHook):
    """Ends a cluster worker's run before step 1 when its session starts at
    max_steps or past it, as one process does. Run it before the step
    logger, which then says nothing of training.
    """

    def __init__(self, max_steps, task_index):
        self._max_steps = max_steps
        self._task_index = task_index

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        step = session.run(self._global_step)
        if step < self._max_steps:
            return
        print(
            "worker task %d: the job is already at global step %d, at or "
            "past --max_steps=%d; nothing to train (raise --max_steps on "
            "every task to train on)"
            % (self._task_index, step, self._max_steps),
            flush=True,
        )
        coord.request_stop()


def save_reached(server, config, saver, train_dir):
    """The checkpoint of the chief's global step, saved unless it is
    train_dir's newest already; None when it could not be written (the
    error is the run's, not this save's).

    The session talks to the chief's own server only (config's device
    filters), so it waits on no lost peer; the operation timeout bounds it.
    """
    global_step = tf.compat.v1.train.get_global_step()
    try:
        with tf.compat.v1.Session(server.target, config=config) as sess:
            step = int(sess.run(global_step))
            newest = checkpoints.latest_checkpoint(train_dir)
            if newest and checkpoints.global_step(newest) == step:
                return newest
            path = os.path.join(train_dir, checkpoints.CHECKPOINT_BASENAME)
            return saver.save(sess, path, global_step=step)
    except tf.errors.OpError:
        return None


def session_manager(scaffold):
    """A `SessionManager` of the scaffold's ops that checks every second."""
    return tf.compat.v1.train.SessionManager(
        local_init_op=scaffold.local_init_op,
        local_init_feed_dict=scaffold.local_init_feed_dict,
        ready_op=scaffold.ready_op,
        ready_for_local_init_op=scaffold.ready_for_local_init_op,
        graph=tf.compat.v1.get_default_graph(),
        recovery_wait_secs=1,
    )


class BoundedSessionCreator(tf.compat.v1.train.SessionCreator):
    """Creates the one session of a run, waiting at most timeout_secs (0: no
    bound) for the cluster to come up.

    A `MonitoredSession` re-creates its session, forever, whenever a peer is
    unavailable (TF1's recovery from a restarted ps). Here a lost peer ends
    the run instead: a second session is refused.
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
                if self._timeout_secs and time.time() > deadline:
                    raise tf.errors.DeadlineExceededError(
                        None,
                        None,
                        "no session after %d s: %s"
                        % (self._timeout_secs, e.message),
                    ) from e
                time.sleep(1)


def timeout_secs(config):
    """The session's --operation_timeout_secs: float seconds, 0 for none."""
    timeout_ms = config.operation_timeout_in_ms if config else 0
    return max(timeout_ms, 0) / 1000
