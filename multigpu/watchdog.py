"""Noticing a lost ps task: its port checked while a worker trains."""

import os
import socket
import sys
import threading
import time

import tensorflow as tf

# Seconds between two looks of a worker at its ps tasks' ports.
WATCHDOG_INTERVAL_SECS = 2


class PsWatchdog:
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
