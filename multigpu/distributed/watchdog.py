"""Noticing lost cluster tasks by their ports, and waits no timeout bounds.

A worker checks its ps tasks' ports while it trains (`PsWatchdog`), a sync
chief its workers' (`cluster.sync_hooks`), each on a `Watcher`'s thread; a
ps counts a worker as started once its port answers (`answering_workers`)
or its done token arrives, and gives up on those it never heard from
(`not_started`). A worker of a cluster of workers only ends itself when a
start-up wait outlasts its bound (`ends_after`).
"""

import contextlib
import functools
import os
import socket
import sys
import threading
import time

import tensorflow as tf

from multigpu import errors

# Seconds between two looks of a worker at its ps tasks' ports.
WATCHDOG_INTERVAL_SECS = 2
# Seconds a port may take to accept a connection before it counts as silent.
CONNECT_TIMEOUT_SECS = 2


class Watcher:
    """A thread per `start` that looks (at ports) every
    WATCHDOG_INTERVAL_SECS, until `stop` or until its look says it is done.
    """

    def __init__(self):
        self._stop = threading.Event()

    def start(self, look):
        """look: callable() -> bool, one look; True ends this thread."""
        threading.Thread(target=self._watch, args=(look,), daemon=True).start()

    def stop(self):
        """Ends every thread at its next look."""
        self._stop.set()

    def _watch(self, look):
        while not self._stop.wait(WATCHDOG_INTERVAL_SECS):
            if look():
                return


class PsWatchdog:
    """Ends the process when a ps task stops answering for timeout_secs
    (0: never, as --operation_timeout_secs=0 says).

    Not in a cluster of workers only, which has no ps: there a lost worker
    fails the step of every other (`collective_cluster`).

    After a ps dies, TensorFlow's own recovery closes the session, and that
    close can wait forever for the dead ps. A ps answers until every worker
    is done, so a silent ps is a lost cluster: say so, and exit 1.
    """

    def __init__(self, task, timeout_secs):
        self._task = task
        self._timeout_secs = timeout_secs
        self._watcher = Watcher()
        self._silent_since = None

    def __enter__(self):
        if not self._timeout_secs:
            return self  # --operation_timeout_secs=0 bounds no wait.
        if self._task.kind.ps_tasks:
            ps = tf.train.ClusterSpec(
                {"ps": self._task.cluster.job_tasks("ps")}
            )
            self._watcher.start(functools.partial(self._look, ps))
        return self

    def __exit__(self, *exc_info):
        self._watcher.stop()

    def _look(self, ps):
        """One look at the ports of the ps tasks (ps: their
        `tf.train.ClusterSpec`); exits once some have not answered for
        timeout_secs."""
        lost = unreachable_tasks(ps)
        if not lost.startswith("unreachable"):
            self._silent_since = None
            return False
        self._silent_since = self._silent_since or time.time()
        if time.time() - self._silent_since >= self._timeout_secs:
            print(
                "%s: error: lost the cluster: %s"
                % (os.path.basename(sys.argv[0]), lost),
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        return False


@contextlib.contextmanager
def ends_after(wait_secs, task, what):
    """Ends the process with one line if the block outlasts wait_secs.

    For the waits no operation timeout bounds: TensorFlow's collective
    runtime resolves a group (the first collective of a run) without one,
    so a peer lost then would hold the worker forever.

    Args:
      wait_secs: float, the bound; 0 for none (the block may wait
        forever, as --operation_timeout_secs=0 says).
      task: the `cluster.ClusterTask`.
      what: str, the wait, for the line, e.g. 'the agreement on the
        settings'.
    """
    if not wait_secs:
        yield
        return
    timer = threading.Timer(wait_secs, _end, (wait_secs, task, what))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _end(wait_secs, task, what):
    print(
        "%s: error: worker task %d: %s did not end within %d s of start-up "
        "(--operation_timeout_secs): %s; start every worker task again"
        % (
            os.path.basename(sys.argv[0]),
            task.task_index,
            what,
            wait_secs,
            unreachable_tasks(task.cluster),
        ),
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


def unreachable_tasks(cluster):
    """Names the tasks of the cluster whose port or server does not answer.

    A killed task's port refuses connections; a stopped (frozen) task's
    port still accepts them (the kernel does), but its server says nothing.

    Returns:
      str, e.g. 'unreachable: worker task 1 (localhost:2224)', 'not
      responding (stopped or stuck): worker task 1 (localhost:2224)', or a
      note that every task answered.
    """
    if cluster is None:
        return "not in a cluster"
    tasks = [
        ("%s task %d (%s)" % (job, index, address), address)
        for job in cluster.jobs
        for index, address in enumerate(cluster.job_tasks(job))
    ]
    lost = [name for name, address in tasks if not answers(address)]
    if lost:
        return "unreachable: " + ", ".join(lost)
    silent = [name for name, address in tasks if not responds(address)]
    if silent:
        return "not responding (stopped or stuck): " + ", ".join(silent)
    return "every task answers; a peer may be stuck or too slow"


def answering_workers(cluster, known):
    """The worker tasks whose port answers, besides those in known.

    Args:
      cluster: the `tf.train.ClusterSpec`.
      known: set of worker task indices already heard from (not probed).

    Returns:
      set of the task indices whose port accepted a connection.
    """
    return {
        i
        for i, address in enumerate(cluster.job_tasks("worker"))
        if i not in known and answers(address)
    }


def not_started(cluster, started, timeout_secs):
    """The ps's error for the workers never heard from within timeout_secs.

    A ps serves until every worker is done: a worker that never starts
    would keep it waiting forever.

    Args:
      cluster: the `tf.train.ClusterSpec`.
      started: set of the worker task indices heard from.
      timeout_secs: int, --operation_timeout_secs.
    """
    return errors.TrainingError(
        "no connection from %s within --operation_timeout_secs=%d; start "
        "every worker task, or raise the timeout"
        % (
            ", ".join(
                "worker task %d (%s)" % (i, address)
                for i, address in enumerate(cluster.job_tasks("worker"))
                if i not in started
            ),
            timeout_secs,
        )
    )


def answers(address):
    """Whether HOST:PORT accepts a connection."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection(
            (host.strip("[]"), int(port)), CONNECT_TIMEOUT_SECS
        ).close()
    except OSError:
        return False
    return True


# An HTTP/2 client's first bytes: the preface, then an empty SETTINGS frame
# (length 0, type 4, no flags, stream 0), which a gRPC server answers with a
# frame of its own.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(
    [0, 0, 0, 4, 0, 0, 0, 0, 0]
)
# The bytes of an HTTP/2 frame header: what a live server sends at least.
_HTTP2_FRAME_HEADER_BYTES = 9


def responds(address):
    """Whether the gRPC server at HOST:PORT answers an HTTP/2 greeting."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection(
            (host.strip("[]"), int(port)), CONNECT_TIMEOUT_SECS
        ) as conn:
            conn.sendall(_HTTP2_HELLO)
            received = b""
            while len(received) < _HTTP2_FRAME_HEADER_BYTES:
                chunk = conn.recv(64)
                if not chunk:
                    return False
                received += chunk
    except OSError:
        return False
    return True
