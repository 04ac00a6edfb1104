"""The ps task of the TF1 cluster: serves the variables until every worker is
done, and says which worker did not start or went silent."""

import time

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import cluster, watchdog

# Seconds between two looks of a ps at the number of done tokens it holds.
TOKEN_LOOK_SECS = 0.1


def run_ps(task, config, timeout_secs=0):
    """Serves the variables of a ps task until every worker has finished.

    Args:
      task: the ps task's `ClusterTask`.
      config: the session's `ConfigProto`.
      timeout_secs: int, how long every worker may take to start, and how
        long the ps waits for the others once the chief is done or gone; 0
        waits forever.

    Raises:
      errors.TrainingError: a worker did not start in time, or the chief
        is done or gone and other workers were not heard from in time.
    """
    config = cluster.task_config(config, task)
    # No operation timeout here: a ps waits as long as training lasts.
    config.operation_timeout_in_ms = 0
    serve_until_done(
        task, cluster.start_server(task, config), config, timeout_secs
    )


def serve_until_done(task, server, config, timeout_secs):
    """Serves until every worker's done token has arrived.

    Args:
      task: the ps task's `ClusterTask`.
      server: its started `tf.distribute.Server`.
      config: the session's `ConfigProto`.
      timeout_secs: int, as in `run_ps`.

    Raises:
      errors.TrainingError: as `run_ps`.
    """
    with tf.Graph().as_default():
        tokens = DoneTokens(cluster.done_signals(task)[task.task_index])
        with tf.compat.v1.Session(server.target, config=config) as sess:
            done = _wait_for_start(task, sess, tokens, timeout_secs)
            _wait_for_done(task, sess, tokens, timeout_secs, done)
    print(
        "ps task %d: all %d workers done." % (task.task_index, task.num_workers)
    )


class DoneTokens:
    """Takes the workers' done tokens from a ps task's queue, losing none.

    A look takes, in one run, as many tokens as the queue holds as the run
    reads its size: the ps alone dequeues, so the dequeue never waits. A
    dequeue that waits, bounded by a run's timeout, may take a token just
    as the timeout ends its step, and then TensorFlow drops the token with
    the step's result: the ps never counted that worker done (a chief that
    had finished, waited for 60 s).
    """

    def __init__(self, queue):
        """queue: the ps task's `tf.queue.FIFOQueue` of done tokens."""
        self._held = queue.dequeue_up_to(queue.size())

    def take(self, sess, wait_secs):
        """The tokens the queue holds, waiting up to wait_secs for one.

        Args:
          sess: a `tf.compat.v1.Session` on the ps task's server.
          wait_secs: float, how long to wait for a first token.

        Returns:
          set of int, the worker task indices whose token was taken.
        """
        deadline = time.monotonic() + wait_secs
        while True:
            held = sess.run(self._held)
            if len(held) or time.monotonic() >= deadline:
                return {int(token) for token in held}
            time.sleep(TOKEN_LOOK_SECS)


def _wait_for_start(task, sess, tokens, timeout_secs):
    """Waits until every worker has started, or said it is done.

    A worker counts as started once its port answers or its done token
    arrives: a short run may end between two looks at its port.

    Returns:
      set of the worker task indices whose done token arrived.

    Raises:
      errors.TrainingError: a worker was not heard from in timeout_secs.
    """
    done, started = set(), set()
    deadline = time.time() + timeout_secs
    while True:
        started |= done
        started |= watchdog.answering_workers(task.cluster, started)
        if len(started) == task.num_workers:
            return done
        if timeout_secs and time.time() > deadline:
            raise watchdog.not_started(task.cluster, started, timeout_secs)
        done |= tokens.take(sess, watchdog.WATCHDOG_INTERVAL_SECS)


def _wait_for_done(task, sess, tokens, timeout_secs, done=()):
    """Takes each worker's done token; gives up once the chief is not there.

    Once the chief (worker task 0) is done, or its port stops answering,
    the other workers have timeout_secs to say they are done.

    Args:
      done: the worker task indices whose token arrived before.

    Raises:
      errors.TrainingError: naming the workers not heard from.
    """
    done = set(done)
    chief_address = task.cluster.task_address("worker", 0)
    chief_away_since = None
    while len(done) < task.num_workers:
        done |= tokens.take(sess, watchdog.WATCHDOG_INTERVAL_SECS)
        chief_done = 0 in done
        chief_there = not chief_done and watchdog.answers(chief_address)
        if chief_there or not timeout_secs:
            chief_away_since = None
            continue
        chief_away_since = chief_away_since or time.time()
        if time.time() - chief_away_since > timeout_secs:
            raise _gave_up(task, done, timeout_secs)


def _gave_up(task, done, timeout_secs):
    """The ps's error once its chief is done or gone and others are silent.

    Args:
      task: the ps task's `ClusterTask`.
      done: set of the worker task indices that said they were done.
      timeout_secs: int, --operation_timeout_secs.
    """
    silent = ", ".join(
        "worker task %d (%s)" % (i, task.cluster.task_address("worker", i))
        for i in range(1, task.num_workers)
        if i not in done
    )
    if 0 in done:
        return errors.TrainingError(
            "ps task %d: the chief (worker task 0) is done, and %s did not "
            "say it was done within --operation_timeout_secs=%d; the ps stops"
            % (task.task_index, silent, timeout_secs)
        )
    return errors.TrainingError(
        "ps task %d: the chief, worker task 0 (%s), is gone: its port has "
        "not answered for --operation_timeout_secs=%d%s; the ps stops"
        % (
            task.task_index,
            task.cluster.task_address("worker", 0),
            timeout_secs,
            ", and no word from %s" % silent if silent else "",
        )
    )
