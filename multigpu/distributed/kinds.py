"""The kinds of run, one row each; what differs between them, a column each.

One process; a ps cluster (the TF1 way: ps tasks hold the variables, each
worker applies its own gradients); a ps cluster with --sync_replicas (each
global step averages --replicas_to_aggregate worker steps); a cluster of
workers only (--variable_update=replicated: every worker holds a copy of
the variables, the gradients all-reduced between them). `of` alone tells
them apart; code elsewhere asks the task's row (`ClusterTask.kind`) what
to do, so a new behaviour is a column every kind answers.

In a cluster of workers only the chief (worker 0) restores or initialises;
every other worker initialises its own variables, then its local init op
takes the chief's values (`collectives.chief_values`). The moving averages
start from each worker's own values and are the chief's only in its
checkpoints; the batch-norm statistics of the step are the last worker's
last tower's. TensorFlow's collective runtime needs:
- the group leader in the server's config as well as the sessions' (in the
  session's alone both workers wait forever);
- every worker in its own session on its own server, seeing only its own
  devices (the collectives reach the others through the servers);
- a bound on every step: a stopped (frozen) peer would hold it forever
  without the operation timeout.
"""

import contextlib
import copy
from typing import Callable, NamedTuple

import tensorflow as tf

from multigpu.distributed import agreement, jobs, ps, sessions
from multigpu.graph import step_optimizer
from multigpu.train_dir import checkpoints


class Kind(NamedTuple):
    """One kind of run; the columns that are code take the task."""

    name: str  # as the lines print it
    # A gRPC server per task; device filters and an operation timeout.
    serves: bool
    device_setter: Callable  # task -> where the variables go
    session_config: Callable  # (ConfigProto, task) -> ConfigProto
    replicas_per_step: Callable  # task -> worker batches per global step
    sync: bool  # a SyncReplicasOptimizer aggregates the gradients
    all_reduce_across_workers: bool
    places_variables: bool  # --variable_device applies
    variable_updates: tuple  # the --variable_update values it runs
    # task -> the ops that tell each ps task this worker is done.
    done_signals: Callable
    # (task, timeout_secs) -> a context manager watching the peers.
    watchdog: Callable
    # (task, config, settings, done_ops, signals, train_dir) -> `Started`;
    # signals: the run's signal handlers, a context manager not yet entered.
    start: Callable
    # (checkpoint, max_steps) -> whether a run whose newest checkpoint is at
    # --max_steps ends before its session, saying so (else every worker
    # stops as its session starts: `finished_hooks`).
    ends_finished: Callable
    finished_hooks: Callable  # (max_steps, task) -> hooks
    # (optimizer, `step_optimizer.Steps`) -> `step_optimizer.StepOptimizer`:
    # `claiming` where workers move the global step each on its own, so a
    # step claims its global step before it writes anything, and one past
    # --max_steps ends its worker's run; elsewhere the stop at --max_steps
    # holds alone.
    step_optimizer: Callable
    # A signal to one process stops every worker at one agreed step.
    agreed_stop: bool
    # (chief, scaffold, target, config, task) -> the task's `SessionCreator`
    # (chief: the chief's restoring one, None on the other workers).
    session: Callable
    # (server, config, saver, train_dir) -> the checkpoint of the chief's
    # last completed step, saved when a peer is lost, or None.
    lost_peer_save: Callable
    lost_peer_advice: str  # told after the cause
    # The chief records its last checkpoint's step on ps task 0 at its end,
    # and another worker that ran the job's last step waits for it
    # (`cluster.report_done`).
    settles_on_ps: bool
    # {flag: why this kind refuses it, '%s' for the flag as given}.
    refused_flags: dict


def _ps_device_setter(task):
    """Variables to the ps tasks in turn, every other op to this worker,
    keeping the tower device ('/gpu:1') given inside it."""
    return tf.compat.v1.train.replica_device_setter(
        worker_device="/job:worker/task:%d" % task.task_index,
        cluster=task.cluster,
    )


def _local_config(config, task):
    """No operation timeout: one process waits on no peer, and a long
    first compile or restore must not end its run."""
    if config is None or not config.operation_timeout_in_ms:
        return config
    config = copy.deepcopy(config)
    config.operation_timeout_in_ms = 0
    return config


def _ps_config(config, task):
    """Device filters: the worker's session neither waits for every other
    worker to be up nor fails when one goes away."""
    config = copy.deepcopy(config)
    config.device_filters.extend(
        ["/job:ps", "/job:%s/task:%d" % (task.job_name, task.task_index)]
    )
    return config


# The task that resolves the collectives' groups.
GROUP_LEADER = "/job:worker/replica:0/task:0"


def check_mode(variable_update, task):
    """ValueError for a --variable_update the task's cluster cannot run."""
    kind = task.kind
    if variable_update not in kind.variable_updates:
        if kind.all_reduce_across_workers:
            raise ValueError(
                "--variable_update=%s needs ps tasks, but the cluster has "
                "workers only (no --ps_hosts); pass "
                "--variable_update=replicated to all-reduce between the "
                "workers, or list ps tasks in --ps_hosts" % variable_update
            )
        raise ValueError(
            "--variable_update=replicated runs in a cluster of workers only,"
            " but --ps_hosts lists %d ps task(s); drop --ps_hosts (and the ps"
            " tasks) or pass --variable_update=parameter_server"
            % task.cluster.num_tasks("ps")
        )


def session_config(config, task):
    """A copy of config (whose device count gives the CPU towers their
    devices) with the group leader set and the worker's own devices only."""
    config = copy.deepcopy(config)
    config.experimental.collective_group_leader = GROUP_LEADER
    del config.device_filters[:]
    config.device_filters.append("/job:worker/task:%d" % task.task_index)
    return config


class Started(NamedTuple):
    """A task's start before step 1 (`Kind.start`)."""

    server: object  # its `tf.distribute.Server`; None in one process
    hooks: list  # to lead the session's hooks
    joins_held_job: bool  # the chief takes the variables the ps tasks hold


def _start_alone(task, config, settings, done_ops, signals, train_dir):
    return Started(None, [], False)


def _start_against_chief(task, config, settings, done_ops, signals, train_dir):
    """The chief joins the job the ps tasks hold, if it is its job and of
    its settings, before its server starts; each other worker compares its
    settings with the chief's."""
    settings = agreement.with_model(settings)
    joins = False
    if task.is_chief:
        settings[jobs.KEY] = jobs.identity(
            train_dir, task.cluster.job_tasks("worker")
        )
        joins = agreement.joins_held_job(task, config, settings)
    else:
        agreement.refuse_stray_worker(task, config)
    server = ps.start_server(task, config)
    wait_secs = sessions.timeout_secs(config)
    hook = agreement.PsAgreementHook(
        task, settings, wait_secs, done_ops, train_dir
    )
    return Started(server, [hook], joins)


def _start_agreeing_all(task, config, settings, done_ops, signals, train_dir):
    settings = agreement.with_model(settings)
    # A signal from the server's start on (its peers may reach it from
    # then) is kept, and stops every worker after step 1.
    with signals:
        server = ps.start_server(task, config)
        agreement.agree(
            server.target, task, settings, sessions.timeout_secs(config)
        )
    return Started(server, [], False)


def _ends_saying_so(checkpoint, max_steps):
    print(
        "%s is already at step %d, at or past --max_steps=%d; nothing"
        " to train (raise --max_steps to train on)"
        % (checkpoint, checkpoints.global_step(checkpoint), max_steps),
        flush=True,
    )
    return True


def _finished_hooks(max_steps, task):
    if max_steps is None:
        return []
    return [sessions.FinishedHook(max_steps, task.task_index)]


def _wait_for_chief(chief, scaffold, target, config, task):
    """Another worker waits for the chief to initialise the model."""
    if chief is not None:
        return chief
    return sessions.PromptWorkerSessionCreator(scaffold, target, config)


def _own_start(chief, scaffold, target, config, task):
    """Every worker initialises its own variables, and its local init op
    takes the chief's values, within the operation timeout."""
    creator = chief
    if creator is None:
        creator = tf.compat.v1.train.ChiefSessionCreator(
            scaffold, target, config
        )
    return sessions.StartUpBoundSessionCreator(
        creator, task, sessions.timeout_secs(config)
    )


_NO_CLUSTER = (
    "%s needs a cluster (--ps_hosts and --worker_hosts, or TF_CONFIG), and "
    "none is given: in one process the towers average their gradients every"
    " step; drop --{flag}"
)
_ACROSS_WORKERS = (
    "%s applies only in a cluster of workers (--worker_hosts or TF_CONFIG "
    "without ps tasks, --variable_update=replicated), whose workers "
    "all-reduce their gradients {how}; this run has {what}, so it would be "
    "ignored; drop --{flag}"
)


def _across_workers(what):
    return {
        flag: _ACROSS_WORKERS.format(how=how, what=what, flag=flag)
        for flag, how in (
            ("gradient_pack_bytes", "in pieces"),
            ("gradient_transfer_dtype", "in that dtype"),
        )
    }


_VARIABLE_DEVICE = (
    "%s does not apply in cluster mode: the variables live on the ps tasks;"
    " drop it"
)
_LOCAL_REFUSED = {
    "sync_replicas": _NO_CLUSTER.format(flag="sync_replicas"),
    "task_index": _NO_CLUSTER.format(flag="task_index"),
    "operation_timeout_secs": (
        "%s bounds how long a cluster's tasks wait on each other, and no "
        "cluster is given (--ps_hosts and --worker_hosts, or TF_CONFIG): one"
        " process waits on no peer; drop it"
    ),
    **_across_workers("no cluster"),
}
_PS_REFUSED = {
    "variable_device": _VARIABLE_DEVICE,
    **_across_workers("ps tasks"),
}

LOCAL = Kind(
    name="one process",
    serves=False,
    device_setter=lambda task: None,
    session_config=_local_config,
    replicas_per_step=lambda task: 1,
    sync=False,
    all_reduce_across_workers=False,
    places_variables=True,
    variable_updates=("parameter_server", "replicated"),
    done_signals=lambda task: [],
    watchdog=lambda task, timeout_secs: contextlib.nullcontext(),
    start=_start_alone,
    ends_finished=_ends_saying_so,
    finished_hooks=lambda max_steps, task: [],
    step_optimizer=step_optimizer.plain,
    agreed_stop=False,
    session=_wait_for_chief,
    lost_peer_save=lambda server, config, saver, train_dir: None,
    lost_peer_advice="",
    settles_on_ps=False,
    refused_flags=_LOCAL_REFUSED,
)
PS = Kind(
    name="ps cluster",
    serves=True,
    device_setter=_ps_device_setter,
    session_config=_ps_config,
    replicas_per_step=lambda task: 1,
    sync=False,
    all_reduce_across_workers=False,
    places_variables=False,
    variable_updates=("parameter_server",),
    done_signals=ps.done_signals,
    watchdog=lambda task, timeout_secs: ps.PsWatchdog(task, timeout_secs),
    start=_start_against_chief,
    ends_finished=lambda checkpoint, max_steps: False,
    finished_hooks=_finished_hooks,
    step_optimizer=step_optimizer.claiming,
    agreed_stop=False,
    session=_wait_for_chief,
    lost_peer_save=lambda server, config, saver, train_dir: None,
    lost_peer_advice="",
    settles_on_ps=True,
    refused_flags=_PS_REFUSED,
)
PS_SYNC = PS._replace(
    name="ps cluster with sync replicas",
    replicas_per_step=lambda task: task.replicas_to_aggregate,
    sync=True,
    step_optimizer=step_optimizer.sync_replicas,
)
WORKERS_ONLY = Kind(
    name="cluster of workers only",
    serves=True,
    device_setter=lambda task: "/job:worker/task:%d" % task.task_index,
    session_config=session_config,
    replicas_per_step=lambda task: task.num_workers,
    sync=False,
    all_reduce_across_workers=True,
    places_variables=False,
    variable_updates=("replicated",),
    done_signals=lambda task: [],
    watchdog=lambda task, timeout_secs: contextlib.nullcontext(),
    start=_start_agreeing_all,
    ends_finished=lambda checkpoint, max_steps: False,
    finished_hooks=_finished_hooks,
    step_optimizer=step_optimizer.plain,
    agreed_stop=True,
    session=_own_start,
    lost_peer_save=sessions.save_reached,
    lost_peer_advice=(
        "; run the same commands on every worker to resume from the "
        "chief's newest checkpoint"
    ),
    settles_on_ps=False,
    refused_flags={
        "variable_device": _VARIABLE_DEVICE,
        "sync_replicas": (
            "%s is for the ps cluster; in a cluster of workers only every "
            "step all-reduces the gradients of all workers already: drop "
            "--sync_replicas"
        ),
    },
)
KINDS = (LOCAL, PS, PS_SYNC, WORKERS_ONLY)


def of(cluster, sync_replicas):
    """The kind of a run of this `tf.train.ClusterSpec` (None: no cluster)
    and --sync_replicas."""
    if cluster is None:
        return LOCAL
    if "ps" not in cluster.jobs:
        return WORKERS_ONLY
    return PS_SYNC if sync_replicas else PS
