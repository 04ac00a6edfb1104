"""A ps cluster's job: which chief's job the ps tasks hold.

The chief that starts a job on its ps tasks publishes, beside its
settings, the job's identity: a job id, random hex made at the job's first
start and kept in the chief's --train_dir (`RECORD`), the --train_dir, its
host and the workers' addresses. A chief of the same job (the same
--train_dir, so the same id) rejoins; a chief of another one (another
--train_dir, or one that lost its record: --clear_train_dir), or a worker
the job does not list, is refused in one line naming both jobs before its
server starts: each reads the publication through a session of ps task
0's own server (`read_published`). At its end the chief records the step
of its newest checkpoint (`ChiefSaved`), which the other workers wait for.
"""

import json
import os
import secrets
import socket

import tensorflow as tf

from multigpu.graph import summaries
from multigpu.train_dir import checkpoints, train_dirs

# In the chief's train_dir: 'HEX\n', the job's id.
RECORD = train_dirs.JOB_RECORD
# The published settings' entry that holds the job (`identity`).
KEY = "job"
# The entry of a publication that a restarted chief of the job cleared:
# no worker compares its settings with it (a chief of the job that ran
# before may have had another --max_steps).
STARTING = "starting"
ID_BYTES = 8
# An absolute scope: the session block's, where the agreement's hook's
# `begin` runs.
VARIABLE_SCOPE = summaries.SESSION + "/"
VARIABLE_NAME = "chief_settings"
# On ps task 0 beside it: the step of the chief's newest checkpoint as its
# run ended (`ChiefSaved`).
SAVED_NAME = "chief_saved"


def identity(train_dir, workers):
    """The job of a chief of train_dir: {'id', 'train_dir', 'host',
    'workers'}; 'id' is the one train_dir records, or None for a job not
    yet started; workers: the cluster's worker addresses."""
    return {
        "id": recorded_id(train_dir),
        "train_dir": os.path.abspath(train_dir),
        "host": socket.gethostname(),
        "workers": list(workers),
    }


def recorded_id(train_dir):
    """The job id train_dir records, or None."""
    try:
        with open(os.path.join(train_dir, RECORD)) as record:
            return record.read().strip() or None
    except (FileNotFoundError, NotADirectoryError):
        return None


def started(job, train_dir):
    """The job with an id, recorded in train_dir (made there if new); the
    chief calls it once its session is made, before it publishes."""
    if job["id"] is not None:
        return job
    job = dict(job, id=secrets.token_hex(ID_BYTES))
    os.makedirs(train_dir, exist_ok=True)
    with open(os.path.join(train_dir, RECORD), "w") as record:
        record.write(job["id"] + "\n")
    return job


def same(held, job):
    """Whether the job the ps tasks hold (held, or None) is job."""
    return (
        held is not None
        and job["id"] is not None
        and (held.get("id") == job["id"])
    )


def named(job):
    """'/tmp/a on host h (job 0a1b2c3d4e5f6a7b)', or '... (a new job)'."""
    if job is None:
        return "a job of no recorded --train_dir"
    what = "job %s" % job["id"] if job.get("id") else "a new job"
    return "%s on host %s (%s)" % (job["train_dir"], job["host"], what)


def other_job_line(held, job, ps_address):
    """The refusal of a chief of job pointed at ps tasks holding held."""
    return (
        "ps task 0 (%s) holds another job: its chief's --train_dir is %s, "
        "this chief's %s; give this job ps tasks of its own (--ps_hosts), or "
        "stop every task of that job, its ps tasks too, before starting this "
        "one; to rejoin that job, start its chief with its --train_dir "
        "(docs/cluster.md)" % (ps_address, named(held), named(job))
    )


def stray_worker_line(held, task):
    """The refusal of a worker (task) whose place the ps tasks' job (held,
    published) gives another address, or None: it belongs to another
    cluster, and a session of its server would end that job's steps."""
    job = held.get(KEY) or {}
    workers = job.get("workers")
    mine = task.cluster.job_tasks("worker")
    if workers is None or (
        len(workers) == len(mine)
        and _same_address(workers[task.task_index], mine[task.task_index])
        and _same_address(workers[0], mine[0])
    ):
        return None
    return (
        "worker task %d: ps task 0 (%s) holds the job of %s, whose workers "
        "are %s, not this worker's --worker_hosts %s: this worker is not one "
        "of that job's; start it with that job's --worker_hosts to join it, "
        "or give its own job ps tasks of its own (--ps_hosts) "
        "(docs/cluster.md)"
        % (
            task.task_index,
            task.cluster.task_address("ps", 0),
            named(job),
            ",".join(workers),
            ",".join(mine),
        )
    )


def _same_address(a, b):
    """Whether HOST:PORT a and b name one address (by the host's IPs)."""
    if a == b:
        return True
    (host_a, _, port_a), (host_b, _, port_b) = (
        a.rpartition(":"),
        b.rpartition(":"),
    )
    return port_a == port_b and bool(_ips(host_a) & _ips(host_b))


def _ips(host):
    try:
        found = socket.getaddrinfo(host.strip("[]"), None)
    except OSError:
        return {host}
    return {info[4][0] for info in found}


def published_variable():
    """(string scalar variable, bool scalar tensor): the chief's settings
    and job on ps task 0, and whether any chief set them. One absolute
    name in every graph: any session on the cluster reads the one the ps
    holds."""
    with tf.device("/job:ps/task:0"), tf.name_scope(VARIABLE_SCOPE):
        published = tf.compat.v1.Variable(
            "",
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


def read_published(ps_address, timeout_ms):
    """What ps task 0 (at ps_address) holds published: a dict, or None.

    Ps task 0 itself runs the read, in a session of its own server. A
    session of this task's server, whose cluster lists other workers than
    the ps's, ended a running job's chief (its step timed out within
    seconds of one such read, in 2 runs of 2; read by the ps's server,
    in 1 run of 1 the job trained on).
    """
    with tf.Graph().as_default() as graph:
        published, ready = published_variable()
        read = published.read_value()
    with _ps_session(ps_address, timeout_ms, graph) as session:
        if not session.run(ready):
            return None
        return json.loads(session.run(read).decode())


def mark_starting(ps_address, timeout_ms, job):
    """Clears the publication of a job whose chief starts again, to its
    job alone (`STARTING`), before that chief's server starts."""
    with tf.Graph().as_default() as graph:
        published, _ = published_variable()
        mark = published.assign(json.dumps({KEY: job, STARTING: True}))
    with _ps_session(ps_address, timeout_ms, graph) as session:
        session.run(mark)


def _ps_session(ps_address, timeout_ms, graph):
    """A session of ps task 0's own server (`read_published`)."""
    config = tf.compat.v1.ConfigProto(
        operation_timeout_in_ms=timeout_ms, device_filters=["/job:ps/task:0"]
    )
    return tf.compat.v1.Session(
        "grpc://" + ps_address, graph=graph, config=config
    )


class ChiefSaved:
    """The step of the chief's newest checkpoint as its run ended, on ps
    task 0 beside its publication (-1: none recorded yet); built in a
    graph of its own."""

    def __init__(self):
        with tf.device("/job:ps/task:0"), tf.name_scope(VARIABLE_SCOPE):
            saved = tf.compat.v1.Variable(
                tf.constant(-1, tf.int64),
                name=SAVED_NAME,
                collections=[],
                trainable=False,
                use_resource=False,
            )
            self._ready = tf.raw_ops.IsVariableInitialized(ref=saved)
        self._step = tf.compat.v1.placeholder(tf.int64, [])
        self._record = tf.compat.v1.assign(
            saved, self._step, validate_shape=False
        )
        self._read = saved.read_value()

    def record(self, session, train_dir):
        newest = checkpoints.latest_checkpoint(train_dir)
        step = checkpoints.global_step(newest) if newest else 0
        session.run(self._record, {self._step: step})

    def step(self, session):
        return session.run(self._read) if session.run(self._ready) else -1
