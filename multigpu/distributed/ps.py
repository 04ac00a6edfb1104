"""The cluster's servers, the ps task, and the waits no timeout bounds.

A ps task serves the variables until every worker is done, and names the
workers that never started or went silent. Lost tasks are noticed by their
servers (`probe`: a gRPC server answers the HTTP/2 greeting; a stopped
task's port accepts and says nothing), on a `Watcher`'s thread: a worker's
ps tasks and chief (`PsWatchdog`); a sync chief's workers
(`cluster.sync_hooks`).
"""

import contextlib
import os
import socket
import sys
import threading
import time

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import jobs, tf_config
from multigpu.train_dir import checkpoints

TOKEN_LOOK_SECS = 0.1


def start_server(task, config):
    """Starts the task's gRPC server and says where it listens: on all
    interfaces, whatever host the cluster spec names, with no
    authentication. A port that cannot be taken is a ValueError."""
    address = task.cluster.task_address(task.job_name, task.task_index)
    port = address.rpartition(":")[2]
    try:
        server = tf.distribute.Server(
            task.cluster, task.job_name, task.task_index, config=config
        )
    except tf.errors.OpError as e:
        where = "--%s_hosts" % task.job_name
        if task.hosts_from == tf_config.TF_CONFIG:
            where = "TF_CONFIG's cluster"
        found = (
            "(%s); stop what uses that port or choose another"
            % (e.message.strip().split("\n")[0])
        )
        if responds(address):
            found = _RUNNING_THERE
        raise ValueError(
            "%s: %s task %d cannot listen on port %s of %s %s"
            % (where, task.job_name, task.task_index, port, address, found)
        ) from None
    print(
        "%s task %d: gRPC server listening on all interfaces, port %s, with "
        "no authentication: whoever reaches the port can run any graph as "
        "this user; keep it behind a firewall or on a private network"
        % (task.job_name, task.task_index, port),
        flush=True,
    )
    return server


_RUNNING_THERE = (
    "(a TensorFlow server answers there: a task runs there already, this "
    "one started twice or a task of another job); that task runs on: stop "
    "it first, or give this task a port no job uses"
)


def done_signals(task):
    """One queue per ps task into which each worker puts a token at its end
    (int32, its task index): a worker's enqueue ops, or a ps's queues."""
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
                ops.append(queue)
    return ops


def run_ps(task, config, timeout_secs=0):
    """Serves the variables of a ps task until every worker has finished.

    timeout_secs: how long every worker may take to start, and how long the
    ps waits for the others once the chief is done or gone (0: forever).
    """
    config = task.kind.session_config(config, task)
    # No operation timeout here: a ps waits as long as training lasts.
    config.operation_timeout_in_ms = 0
    try:
        with errors.raising():
            server = start_server(task, config)
            serve_until_done(task, server, config, timeout_secs)
    except errors.Signalled as e:
        raise errors.Interrupted(
            "ps task %d interrupted (%s): the job's variables it held are "
            "gone, and every worker ends within its --operation_timeout_secs;"
            " start the ps tasks again, then every worker, to resume from the"
            " chief's newest checkpoint" % (task.task_index, e.name),
            e.exit_code,
        ) from None


def serve_until_done(task, server, config, timeout_secs):
    with tf.Graph().as_default():
        tokens = DoneTokens(done_signals(task)[task.task_index])
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
        self._held = queue.dequeue_up_to(queue.size())

    def take(self, sess, wait_secs):
        """The worker task indices whose token the queue holds, waiting up
        to wait_secs for one."""
        deadline = time.monotonic() + wait_secs
        while True:
            held = sess.run(self._held)
            errors.raise_if_signalled()
            if len(held) or time.monotonic() >= deadline:
                return {int(token) for token in held}
            time.sleep(TOKEN_LOOK_SECS)


def _wait_for_start(task, sess, tokens, timeout_secs):
    """Waits until every worker has started; returns those already done.

    A done token counts as a start: a short run may end between two looks
    at its port.
    """
    done, started = set(), set()
    deadline = time.time() + timeout_secs
    while True:
        started |= done
        started |= {
            i
            for i, address in enumerate(task.cluster.job_tasks("worker"))
            if i not in started and responds(address)
        }
        if len(started) == task.num_workers:
            return done
        if timeout_secs and time.time() > deadline:
            raise not_started(task.cluster, started, timeout_secs)
        done |= tokens.take(sess, WATCHDOG_INTERVAL_SECS)


def _wait_for_done(task, sess, tokens, timeout_secs, done=()):
    """Takes each worker's done token. Once the chief is done or its port
    stops answering, the others have timeout_secs to say they are done."""
    done = set(done)
    chief_address = task.cluster.task_address("worker", 0)
    chief_away_since = None
    while len(done) < task.num_workers:
        done |= tokens.take(sess, WATCHDOG_INTERVAL_SECS)
        chief_done = 0 in done
        chief_there = not chief_done and responds(chief_address)
        if chief_there or not timeout_secs:
            chief_away_since = None
            continue
        chief_away_since = chief_away_since or time.time()
        if time.time() - chief_away_since > timeout_secs:
            raise _gave_up(task, done, timeout_secs)


def _gave_up(task, done, timeout_secs):
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


WATCHDOG_INTERVAL_SECS = 2
CONNECT_TIMEOUT_SECS = 2


class Watcher:
    """A thread per `start` that runs look() every WATCHDOG_INTERVAL_SECS
    until `stop` or until look returns True."""

    def __init__(self):
        self._stop = threading.Event()

    def start(self, look):
        threading.Thread(target=self._watch, args=(look,), daemon=True).start()

    def stop(self):
        self._stop.set()

    def _watch(self, look):
        while not self._stop.wait(WATCHDOG_INTERVAL_SECS):
            if look():
                return


class PsWatchdog:
    """Ends the process when a ps task, or on another worker the chief,
    has not answered for timeout_secs (0: never).

    After a ps dies, TensorFlow's own recovery closes the session, and that
    close can wait forever for the dead ps; a stopped ps holds every step
    as long as it is stopped. A ps answers until every worker is done, so
    a silent ps is a lost cluster. The chief alone saves the job: another
    worker training on without it makes steps no checkpoint will hold, so
    a chief gone ends the other workers too, once it answered and had
    published its job (a chief lost before its session was made ends them
    by their session's bound). A chief seen answering that is silent at
    the look that finds its job on ps task 0 (it went between two looks)
    is silent from that look on.
    """

    def __init__(self, task, timeout_secs):
        self._task = task
        self._timeout_secs = timeout_secs
        self._watcher = Watcher()
        self._silent_since = {}
        self._chief = task.cluster.task_address("worker", 0)
        self._chief_job = None  # its `jobs.identity` once seen
        self._chief_seen = False  # whether it answered a look

    def __enter__(self):
        if self._timeout_secs:  # --operation_timeout_secs=0 bounds no wait.
            self._watcher.start(self._look)
        return self

    def __exit__(self, *exc_info):
        self._watcher.stop()

    def _watched(self):
        tasks = [
            ("ps task %d (%s)" % (i, address), address)
            for i, address in enumerate(self._task.cluster.job_tasks("ps"))
        ]
        if not self._task.is_chief:
            tasks.append(
                ("the chief, worker task 0 (%s)" % self._chief, self._chief)
            )
        return tasks

    def _look(self):
        now = time.time()
        for name, address in self._watched():
            state = probe(address)
            if address == self._chief and not self._chief_job:
                self._chief_seen |= state == ANSWERS
                if self._chief_seen:
                    self._chief_job = published_job(
                        self._task, int(self._timeout_secs * 1000)
                    )
                if state == ANSWERS or not self._chief_job:
                    continue
            if state == ANSWERS:
                self._silent_since.pop(address, None)
                continue
            since = self._silent_since.setdefault(address, now)
            if now - since >= self._timeout_secs:
                _exit_saying(self._line(name, address, state, now - since))
        return False

    def _line(self, name, address, state, secs):
        line = "%s %s" % (name, SILENT_FOR[state] % secs)
        if address == self._chief:
            return chief_gone(self._task, line, self._chief_job)
        if state == NO_PORT:
            return "lost the cluster: %s: %s" % (NO_PORT, name)
        return "lost the cluster: " + line


def published_job(task, timeout_ms):
    """The job its chief published on ps task 0 (`jobs.identity`), {} if
    none yet (or a restarted chief's, not yet published again)."""
    address = task.cluster.task_address("ps", 0)
    try:
        held = jobs.read_published(address, timeout_ms) or {}
    except tf.errors.OpError:
        return {}
    if held.get(jobs.STARTING):
        return {}
    return held.get(jobs.KEY) or {}


def chief_gone(task, line, job):
    """The line of a worker whose chief has gone (line: how it went;
    job: the published `jobs.identity`, {} if unknown)."""
    where = "the chief's --train_dir"
    if job.get("train_dir"):
        where += ", %s" % jobs.named(job)
        newest = None
        if job.get("host") == socket.gethostname():
            newest = checkpoints.latest_checkpoint(job["train_dir"])
        where += ": %s" % (newest or "none yet, so step 0")
    return (
        "worker task %d: %s; the steps since the chief's newest checkpoint "
        "are in no checkpoint, so this worker stops: the job resumes from "
        "the newest checkpoint in %s; start every task of the job again, "
        "the ps tasks first, then the chief (worker task 0) and the other "
        "workers, with the job's commands" % (task.task_index, line, where)
    )


def _exit_saying(line):
    print(
        "%s: error: %s" % (os.path.basename(sys.argv[0]), line),
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)


@contextlib.contextmanager
def ends_after(wait_secs, task, what):
    """Ends the process with one line if the block outlasts wait_secs (0:
    no bound); what names the wait, e.g. 'the agreement on the settings'.

    For the waits no operation timeout bounds: TensorFlow's collective
    runtime resolves a group (the first collective of a run) without one,
    so a peer lost then would hold the worker forever.
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
    _exit_saying(
        "worker task %d: %s did not end within %d s of start-up "
        "(--operation_timeout_secs): %s; start every worker task again"
        % (task.task_index, what, wait_secs, unreachable_tasks(task.cluster))
    )


def unreachable_tasks(cluster):
    """Names the tasks whose port or server does not answer, e.g.
    'unreachable: worker task 1 (localhost:2224)'.

    A killed task's port refuses connections; a stopped (frozen) task's
    port still accepts them (the kernel does), but its server says
    nothing; another program there answers, but not as gRPC.
    """
    if cluster is None:
        return "not in a cluster"
    tasks = [
        ("%s task %d (%s)" % (job, index, address), probe(address))
        for job in cluster.jobs
        for index, address in enumerate(cluster.job_tasks(job))
    ]
    found = [
        "%s: %s" % (state, ", ".join(n for n, s in tasks if s == state))
        for state in (NO_PORT, SILENT, NOT_GRPC)
        if any(s == state for _, s in tasks)
    ]
    if found:
        return "; ".join(found)
    return "every task answers; a peer may be stuck or too slow"


def not_started(cluster, started, timeout_secs):
    """The ps's error for the workers never heard from within timeout_secs:
    a worker that never starts would keep it waiting forever."""
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
# SETTINGS frame of its own.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(
    [0, 0, 0, 4, 0, 0, 0, 0, 0]
)
# A frame's header: length (3 bytes), type, flags, stream (4 bytes).
_HTTP2_FRAME_HEADER_BYTES = 9
_HTTP2_SETTINGS = 4
# What a task's port tells a look (`probe`).
ANSWERS = "answers"
NO_PORT = "unreachable"
SILENT = "not responding (stopped or stuck)"
NOT_GRPC = "not a TensorFlow server (another program holds its port)"
# How a watchdog's line says each, of a task silent for N s.
SILENT_FOR = {
    NO_PORT: "has not accepted a connection for %d s: ended, or its host "
    "is unreachable",
    SILENT: "holds its port but has not answered for %d s: stopped or stuck",
    NOT_GRPC: "holds its port but has not answered as a TensorFlow server "
    "for %d s: another program listens there",
}


def probe(address):
    """What HOST:PORT does with an HTTP/2 greeting: ANSWERS (a gRPC
    server's SETTINGS frame comes back), NO_PORT, SILENT (nothing within
    CONNECT_TIMEOUT_SECS: the kernel of a stopped process still accepts)
    or NOT_GRPC (other bytes, or the connection closed)."""
    host, _, port = address.rpartition(":")
    try:
        conn = socket.create_connection(
            (host.strip("[]"), int(port)), CONNECT_TIMEOUT_SECS
        )
    except OSError:
        return NO_PORT
    received = b""
    with conn:
        try:
            conn.sendall(_HTTP2_HELLO)
            while len(received) < _HTTP2_FRAME_HEADER_BYTES:
                chunk = conn.recv(64)
                if not chunk:
                    return NOT_GRPC
                received += chunk
        except socket.timeout:
            return SILENT
        except OSError:
            return NOT_GRPC
    if received[3] != _HTTP2_SETTINGS:
        return NOT_GRPC
    return ANSWERS


def responds(address):
    """Whether the gRPC server at HOST:PORT answers an HTTP/2 greeting."""
    return probe(address) == ANSWERS
