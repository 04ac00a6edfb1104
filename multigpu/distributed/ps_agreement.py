"""Agreement before step 1 in the ps cluster: each worker against its chief.

The workers of a ps cluster share the variables on the ps, but each builds
its own graph from its own flags: a worker started with another
--learning_rate or --batch_size would move the shared variables its own
way, silently. Once its session is made, the chief publishes its settings
(JSON) in a string variable on ps task 0; every other worker, once its own
session is made and before its first step, reads them (waiting for the
chief at most the start-up wait) and compares them with its own. A worker
that differs tells the ps it is done and ends with `agreement.difference`'s
line, exit 1; the chief and the workers that agree train on, as they would
without it (asynchronous training needs no one worker). The variable is in
no collection: no checkpoint holds it, no init op sets it, and a chief that
starts again publishes its settings again.
"""

import json
import time

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import agreement, watchdog
from multigpu.graph import summaries

# What a worker's refusal adds: the chief's settings it read may be those
# of an earlier job whose ps tasks were left running.
STALE_PS_NOTE = (
    "; worker task 0's are those published on ps task 0: if it now runs "
    "with other flags, the ps tasks are left from an earlier job, and "
    "every task of that job, its ps tasks too, must stop first"
)
# What a restarted chief may change: where it stops, not what it learns.
RESTART_MAY_CHANGE = ("max_steps",)
# Seconds between two looks at the chief's settings while it starts.
POLL_SECS = 0.5
# The name of the chief's settings on ps task 0, under an absolute scope:
# the session block's, where the hook's `begin` runs.
VARIABLE_SCOPE = summaries.SESSION + "/"
VARIABLE_NAME = "chief_settings"


def _published_variable(text=""):
    """The chief's settings on ps task 0, and whether any chief set them.

    Args:
      text: str, the JSON its initializer sets.

    Returns:
      (string scalar variable, bool scalar tensor): the variable, under the
      same absolute name in every graph, so that any session on the
      cluster reads the one the ps holds.
    """
    with tf.device("/job:ps/task:0"), tf.name_scope(VARIABLE_SCOPE):
        published = tf.compat.v1.Variable(
            text,
            name=VARIABLE_NAME,
            collections=[],
            trainable=False,
            use_resource=False,
        )
        # The raw op: tf.compat.v1.is_variable_initialized's tensor, which
        # a chief never runs, logs an 'Object was never used' ERROR block at
        # the chief's end once the hook is collected.
        ready = tf.raw_ops.IsVariableInitialized(ref=published)
    return published, ready


def held_job(target, task, config, wait_secs):
    """The settings of the job the ps tasks hold: those its chief published
    on ps task 0 (a dict), or None when no chief did (a new ps).

    Args:
      target: str, this task's server target.
      task: the chief's `cluster.ClusterTask`.
      config: its session's `ConfigProto`.
      wait_secs: float, how long to wait for ps task 0 to start (0: no
        bound).

    Raises:
      errors.TrainingError: ps task 0 did not answer within wait_secs.
    """
    address = task.cluster.task_address("ps", 0)
    deadline = time.time() + wait_secs
    while not watchdog.answers(address):
        if wait_secs and time.time() > deadline:
            raise errors.TrainingError(
                "worker task %d: no answer from ps task 0 (%s) within %d s "
                "of start-up (--operation_timeout_secs); start the ps tasks, "
                "or look in their output for why they ended"
                % (task.task_index, address, wait_secs)
            )
        time.sleep(POLL_SECS)
    with tf.Graph().as_default() as graph:
        published, ready = _published_variable()
        read = published.read_value()
    with tf.compat.v1.Session(target, graph=graph, config=config) as session:
        if not session.run(ready):
            return None
        return json.loads(session.run(read).decode())


def refuse_other_job(held, settings):
    """Refuses a chief whose ps tasks hold a job of other settings.

    A chief restarted with other flags under running workers would train
    at other settings; the ps tasks of an earlier job, left running, would
    hand that job's settings to the new job's workers. It may change where
    it stops (RESTART_MAY_CHANGE).

    Args:
      held: dict, the settings of `held_job`.
      settings: dict, this chief's.

    Raises:
      ValueError: naming each setting that differs, both values, and what
        to do.
    """
    names = [
        name
        for name in agreement.differing_names([held, settings])
        if name not in RESTART_MAY_CHANGE
    ]
    if not names:
        return
    differing = ", ".join(
        "%s (the job's chief has %s, this chief %s)"
        % (
            name if name == agreement.VARIABLES else "--" + name,
            agreement.said(name, held.get(name)),
            agreement.said(name, settings.get(name)),
        )
        for name in names
    )
    raise ValueError(
        "the ps tasks hold a job started by a chief with other flags: %s; "
        "start this chief with that job's flags to rejoin it, or stop every "
        "task of that job, its ps tasks too, to start a new one "
        "(docs/cluster.md)" % differing
    )


class PsAgreementHook(tf.compat.v1.train.SessionRunHook):
    """Publishes the chief's settings; checks another worker's against them.

    Args:
      task: the worker's `cluster.ClusterTask`, in a cluster with ps tasks.
      settings: dict of str -> JSON value (`agreement.agree`'s).
      wait_secs: float, how long a worker waits for the chief's settings
        (0: no bound, as --operation_timeout_secs=0).
      done_ops: the worker's enqueue ops, one per ps task, that tell the ps
        it is done (`cluster.done_signals`); a worker that differs runs them.
    """

    def __init__(self, task, settings, wait_secs, done_ops):
        self._task = task
        self._settings = settings
        self._wait_secs = wait_secs
        self._done = done_ops

    def begin(self):
        self._published, self._ready = _published_variable(
            json.dumps(self._settings, sort_keys=True)
        )
        self._publish = self._published.initializer
        self._read = self._published.read_value()

    def after_create_session(self, session, coord):
        if self._task.is_chief:
            session.run(self._publish)
            return
        chief = json.loads(self._wait_for_chief(session).decode())
        line = agreement.difference(
            [chief, self._settings], tasks=[0, self._task.task_index]
        )
        if line is not None:
            # The ps need not wait for a worker that leaves.
            session.run(self._done)
            raise ValueError(line + STALE_PS_NOTE)

    def _wait_for_chief(self, session):
        """The chief's settings, bytes of JSON, once it has published them."""
        deadline = time.time() + self._wait_secs
        while not session.run(self._ready):
            if self._wait_secs and time.time() > deadline:
                raise errors.TrainingError(
                    "worker task %d: the chief (worker task 0) did not "
                    "publish its settings on ps task 0 within %d s "
                    "(--operation_timeout_secs); start the chief, or look "
                    "in its output for why it ended"
                    % (self._task.task_index, self._wait_secs)
                )
            time.sleep(POLL_SECS)
        return session.run(self._read)
