"""Beyond one machine: between-graph replication on TensorFlow's gRPC runtime.

Every task runs the same script; worker 0 is the chief. The kinds of
cluster are `kinds`' rows.
"""

import collections
import functools
import ipaddress
import sys
import time

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import jobs, kinds, ps, tf_config


class ClusterTask(
    collections.namedtuple(
        "ClusterTask",
        "cluster job_name task_index sync_replicas replicas_to_aggregate "
        "hosts_from",
        defaults=("flags",),
    )
):
    """This process's place in the cluster (cluster None: no cluster).

    hosts_from: 'flags' or 'TF_CONFIG', for errors.
    """

    @property
    def is_chief(self):
        return self.job_name == "worker" and self.task_index == 0

    @property
    def kind(self):
        return kinds.of(self.cluster, self.sync_replicas)

    @property
    def replicas_per_step(self):
        """Worker batches that make one global step."""
        return self.kind.replicas_per_step(self)

    @property
    def num_workers(self):
        return self.cluster.num_tasks("worker") if self.kind.serves else 1


LOCAL_TASK = ClusterTask(None, "worker", 0, False, 1)


def _parse_hosts(flag, hosts):
    parsed = [h.strip() for h in hosts.split(",") if h.strip()]
    for host in parsed:
        name, _, port = host.rpartition(":")
        if not name or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                "--%s: %r has no port; expected HOST:PORT, e.g. "
                "localhost:2222" % (flag, host)
            )
    if not parsed:
        raise ValueError("--%s is empty; expected HOST:PORT,..." % flag)
    return parsed


def cluster_task(
    ps_hosts,
    worker_hosts,
    job_name,
    task_index,
    sync_replicas=False,
    replicas_to_aggregate=0,
):
    """`task_of` the cluster flags' values."""
    hosts = tf_config.ClusterFlags(ps_hosts, worker_hosts, job_name, task_index)
    return task_of(hosts, sync_replicas, replicas_to_aggregate)


def task_of(hosts, sync_replicas=False, replicas_to_aggregate=0, from_env=None):
    """The `ClusterTask` of the cluster flags (hosts: `tf_config.
    ClusterFlags`), or ValueError; `LOCAL_TASK` when no hosts are given.

    replicas_to_aggregate: 0 for one from every worker; from_env: None for
    the flags, `tf_config.TF_CONFIG` when the hosts came from it.
    """
    ps_hosts, worker_hosts = hosts.ps_hosts, hosts.worker_hosts
    job_name, task_index = hosts.job_name, hosts.task_index
    if not ps_hosts and not worker_hosts:
        if job_name:
            # Else a task started without its hosts trains alone, unnoticed.
            raise ValueError(
                "--job_name=%s needs --ps_hosts and --worker_hosts (cluster "
                "mode); leave it out to train in this one process" % job_name
            )
        return LOCAL_TASK
    jobs = {"worker": _parse_hosts("worker_hosts", worker_hosts)}
    if ps_hosts:
        jobs["ps"] = _parse_hosts("ps_hosts", ps_hosts)
    cluster = tf.train.ClusterSpec(jobs)
    _check_job_name(job_name, bool(ps_hosts))
    addresses = [a for job in sorted(jobs) for a in jobs[job]]
    _check_addresses_apart(addresses, jobs, from_env)
    _check_task_index(cluster, job_name, task_index)
    _warn_of_public_addresses(addresses)
    num_workers = cluster.num_tasks("worker")
    return ClusterTask(
        cluster,
        job_name,
        task_index,
        sync_replicas,
        replicas_to_aggregate or num_workers,
    )


def _check_addresses_apart(addresses, jobs, hosts_from):
    shared = sorted({a for a in addresses if addresses.count(a) > 1})
    if not shared:
        return
    lists = "--worker_hosts lists"
    if hosts_from is not None:
        lists = "%s's cluster lists" % hosts_from
    elif "ps" in jobs:
        lists = "--ps_hosts and --worker_hosts list"
    raise ValueError(
        "%s %s more than once; every task needs a HOST:PORT of its own"
        % (lists, ", ".join(shared))
    )


def _check_task_index(cluster, job_name, task_index):
    num_tasks = cluster.num_tasks(job_name)
    if not 0 <= task_index < num_tasks:
        raise ValueError(
            "--task_index=%d is out of range: --%s_hosts lists %d task(s), "
            "so 0..%d" % (task_index, job_name, num_tasks, num_tasks - 1)
        )


def _warn_of_public_addresses(addresses):
    for address in addresses:
        if not _is_private(address.rpartition(":")[0]):
            print(
                "WARNING: %s is not a loopback or private address. The "
                "TensorFlow server has no authentication and runs any graph "
                "sent to it: keep the cluster on a trusted network." % address,
                file=sys.stderr,
            )


def _check_job_name(job_name, has_ps):
    if job_name not in ("ps", "worker"):
        raise ValueError(
            "--job_name must be 'ps' or 'worker', got %r" % job_name
        )
    if job_name == "ps" and not has_ps:
        raise ValueError(
            "--job_name=ps but --ps_hosts is empty: a cluster of workers "
            "only has no ps task; start each task with --job_name=worker"
        )


def _is_private(host):
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_private


def device_setter(task):
    """The device function of a task's graph (None when not in a cluster)."""
    return task.kind.device_setter(task)


def sync_hooks(opt, task):
    """The session hooks a `SyncReplicasOptimizer` (opt; None: no hooks)
    needs on every worker, after the step's `apply_gradients`."""
    if opt is None:
        return []
    # Read by the optimizer's hook as the session starts. A worker that ends
    # before (refused, interrupted) would else end in a block of '=' lines
    # after its one line: TensorFlow logs a tensor never read as it is
    # deleted, at exit (tf_should_use).
    opt.ready_for_local_init_op.mark_used()
    tokens_op = opt.get_init_tokens_op(task.num_workers)
    hooks = [
        opt.make_session_run_hook(task.is_chief),
        _ReleaseWorkersHook(tokens_op),
    ]
    if task.is_chief:
        hooks.append(_LostWorkersHook(tokens_op, task))
    return hooks


class _ReleaseWorkersHook(tf.compat.v1.train.SessionRunHook):
    """At its end, a worker puts one token per worker in the token queue.

    A worker that took more than its share of tokens can reach the last
    step while another still waits for a token that no step will make; the
    tokens let that worker's step end, see the last step and stop.
    """

    def __init__(self, tokens_op):
        self._tokens_op = tokens_op

    def end(self, session):
        try:
            session.run(self._tokens_op)
        except tf.errors.CancelledError:
            # The chief's queue runner closes the token queue when the chief
            # stops: then no worker waits for a token any more.
            pass


class _LostWorkersHook(tf.compat.v1.train.SessionRunHook):
    """The chief puts one token per worker in the token queue for each
    worker lost while it trains: one whose server answered a look and no
    longer answers one (`ps.responds`): killed (its port closed), stopped
    (SIGSTOP: the kernel still accepts on its port) or stuck.

    A lost worker sends no more gradients, and the dequeue of its step's
    token may stay pending on the ps and take the next token made: the
    chief's step would wait for a token that no step makes, until its
    operation timeout. With the tokens, as from a worker that leaves
    (`_ReleaseWorkersHook`), the chief trains on, each global step
    averaging the gradients of the workers left.
    """

    def __init__(self, tokens_op, task):
        self._tokens_op = tokens_op
        self._addresses = [
            task.cluster.task_address("worker", i)
            for i in range(task.num_workers)
            if i != task.task_index
        ]
        self._watcher = ps.Watcher()

    def after_create_session(self, session, coord):
        self._watcher.start(
            functools.partial(self._look, session, set(), set())
        )

    def end(self, session):
        self._watcher.stop()

    def _look(self, session, seen, lost):
        """A worker that answered once (seen) and no longer does is lost;
        one that answers again (restarted) may be lost again. True once the
        session ended or failed: no step waits."""
        for address in self._addresses:
            if ps.responds(address):
                seen.add(address)
                lost.discard(address)
            elif address in seen and address not in lost:
                lost.add(address)
                try:
                    session.run(self._tokens_op)
                except (tf.errors.OpError, RuntimeError):
                    return True
        return False


def may_fuse_ops(task, compute_dtype):
    """Whether Grappler's remapper may fuse the ops of a task's graph.

    Not on a cluster worker computing in bfloat16: the remapper fuses a
    bfloat16 Conv2D + BiasAdd + Relu into _FusedConv2D, whose op allows no
    bfloat16, counting on oneDNN's graph pass to make it
    _MklNativeFusedConv2D. A local session runs that pass on the graph it
    optimised; a worker first reads its partition of the graph back from
    the master and checks every node against its op, and fails each step.
    Unfused, oneDNN's pass still merges Conv2D and BiasAdd.
    """
    return not task.kind.serves or compute_dtype != tf.bfloat16


def task_config(config, task):
    """The session config of a task, as its kind makes it."""
    return task.kind.session_config(config, task)


def report_done(server, done_ops, task, runs, config, max_steps, train_dir):
    """Runs done_ops, then says what the worker ran, unless it ran no step
    of a job already at max_steps (int or None): its
    `sessions.FinishedHook` said so, and that line stays its last.

    In a ps cluster, first `_settle`.
    """
    with tf.compat.v1.Session(server.target, config=config) as sess:
        global_step = sess.run(tf.compat.v1.train.get_global_step())
        if task.kind.settles_on_ps:
            _settle(server, config, task, train_dir, (global_step, max_steps))
        sess.run(done_ops)
    if runs == 0 and max_steps is not None and global_step >= max_steps:
        return
    print(
        "Worker task %d ran %d local steps; global step %d."
        % (task.task_index, runs, global_step),
        flush=True,
    )


SAVED_POLL_SECS = 0.5


def _settle(server, config, task, train_dir, steps):
    """A ps cluster worker's last word before it says it is done.

    The chief records on ps task 0 the step of its newest checkpoint
    (`jobs.ChiefSaved`). Another worker's steps (steps: its global step
    and max_steps, an int or None) are saved once the chief records a
    step as far: one whose run ended at max_steps waits for the chief's
    last checkpoint, as long as the chief answers within the operation
    timeout (`ps.PsWatchdog` ends it sooner where it saw the chief's job:
    not for a chief gone between two of its looks); one that ended before
    while its chief is gone ends saying so.
    """
    global_step, max_steps = steps
    with tf.Graph().as_default() as graph:
        saved = jobs.ChiefSaved()
    with tf.compat.v1.Session(
        server.target, graph=graph, config=config
    ) as sess:
        if task.is_chief:
            saved.record(sess, train_dir)
            return
        chief = task.cluster.task_address("worker", 0)
        ended = max_steps is not None and global_step >= max_steps
        timeout_secs = config.operation_timeout_in_ms / 1000
        answered = time.time()
        while saved.step(sess) < global_step:
            if ps.responds(chief):
                if not ended:
                    return
                answered = time.time()
            elif not ended or 0 < timeout_secs <= time.time() - answered:
                raise errors.TrainingError(
                    ps.chief_gone(
                        task,
                        "the chief, worker task 0 (%s) ended before it saved "
                        "global step %d" % (chief, global_step),
                        ps.published_job(task, config.operation_timeout_in_ms),
                    )
                )
            time.sleep(SAVED_POLL_SECS)
