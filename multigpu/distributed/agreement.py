"""Agreement before step 1: the workers of a cluster compare their settings.

Each worker builds its graph from its own flags: one started with another
learning rate would train apart, one with another tower count or other
collectives would wait forever. The settings are a dict of name -> JSON
value (the flags that change the numbers, the digests of the model's
variables and ops); a difference ends the worker with one line naming each
setting and each task's value.

In a cluster of workers only every worker all-gathers every other's
settings over the servers (`agree`), each wait bounded: first the peers'
ports (a worker whose graph failed to build never opens its port), then
the all-gather itself (`ps.ends_after`). A worker whose worker task 0
leads a group formed without it (a running job's chief) is refused by
that leader, and ends in one line (`refused_by_leader`).

In the ps cluster each worker compares with its chief. The chief publishes
its settings in a string variable on ps task 0 once its session is made;
every other worker reads them before its first step (waiting for the chief
at most the start-up wait). One that differs tells the ps it is done and
ends, exit 1; the others train on (asynchronous training needs no one
worker). The variable is in no collection: no checkpoint holds it, no init
op sets it, and a chief that starts again publishes again.
"""

import hashlib
import json
import re
import time

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.distributed import jobs, ps, sessions
from multigpu.graph import towers

# The all-gather takes one shape from every worker: the JSON padded to this.
SETTINGS_BYTES = 16384
# Apart from the training graph's collective keys, which count up from 1.
GROUP_KEY = 2**30
INSTANCE_KEY = 2**30
PORT_POLL_SECS = 0.5
# The settings that stand for the model's code.
VARIABLES = "the model's variables"
OPS = "the model's ops"


def variables_digest(variables):
    """'24 variables, sha1 0a1b2c3d4e5f': their names, shapes and dtypes."""
    described = sorted(
        "%s %s %s" % (v.op.name, v.shape, v.dtype.base_dtype.name)
        for v in variables
    )
    digest = hashlib.sha1("\n".join(described).encode()).hexdigest()[:12]
    return "%d variables, sha1 %s" % (len(described), digest)


def ops_digest(graph):
    """'260 ops, sha1 0a1b2c3d4e5f': tower 0's ops, by no name or device.

    The model, its loss and gradients, but the staging of its batch (a
    worker's own --prefetch_to_device): each op by its type, its tensors'
    dtypes and shapes and a number constant's value. Names and devices
    differ between processes and are left out; two models of the same
    variables but other ops (ReLU, or tanh times 3) differ.
    """
    scope = towers.tower_scope(0)
    staging = scope + towers.STAGING_SCOPE + "/"
    described = sorted(
        _describe_op(op)
        for op in graph.get_operations()
        if op.name.startswith(scope) and not op.name.startswith(staging)
    )
    digest = hashlib.sha1("\n".join(described).encode()).hexdigest()[:12]
    return "%d ops, sha1 %s" % (len(described), digest)


def with_model(settings):
    """settings (a dict, or None) with the model's digests."""
    settings = dict(settings or {})
    settings[VARIABLES] = variables_digest(tf.compat.v1.global_variables())
    settings[OPS] = ops_digest(tf.compat.v1.get_default_graph())
    return settings


def _describe_op(op):
    """'Type(dtype shape, ...) -> dtype shape, ...', and a number
    constant's value."""
    text = "%s(%s) -> %s" % (
        op.type,
        _describe_tensors(op.inputs),
        _describe_tensors(op.outputs),
    )
    if op.type == "Const" and op.outputs[0].dtype != tf.string:
        value = tf.make_ndarray(op.get_attr("value"))
        text += " = " + hashlib.sha1(value.tobytes()).hexdigest()
    return text


def _describe_tensors(tensors):
    return ", ".join("%s %s" % (t.dtype.name, t.shape) for t in tensors)


def agree(target, task, settings, wait_secs):
    """Returns once every worker has the same settings, else `difference`'s
    ValueError. wait_secs (0: forever) bounds the wait for the peers' ports,
    then the all-gather."""
    wait_for_peers(task, wait_secs)
    gathered = _all_gather(target, task, encode(settings), wait_secs)
    line = difference([decode(codes) for codes in gathered])
    if line is not None:
        raise ValueError(line)


def wait_for_peers(task, wait_secs):
    """Waits until every other worker's server answers, at most wait_secs:
    a program other than a worker on a worker's port is no peer."""
    addresses = task.cluster.job_tasks("worker")
    waiting = set(range(len(addresses))) - {task.task_index}
    deadline = time.time() + wait_secs
    while waiting:
        states = {i: ps.probe(addresses[i]) for i in waiting}
        waiting = {i for i, state in states.items() if state != ps.ANSWERS}
        if not waiting:
            return
        if wait_secs and time.time() > deadline:
            raise errors.TrainingError(
                "worker task %d: no answer from %s within %d s of start-up "
                "(--operation_timeout_secs); start every worker task with "
                "the same flags, or look in its output for why it ended"
                % (
                    task.task_index,
                    ", ".join(
                        "worker task %d (%s%s)"
                        % (i, addresses[i], _said_state(states[i]))
                        for i in sorted(waiting)
                    ),
                    wait_secs,
                )
            )
        time.sleep(PORT_POLL_SECS)


def _said_state(state):
    """', not a TensorFlow server (...)' for a port that holds something
    else than a worker not yet started."""
    return "" if state == ps.NO_PORT else ", " + state


def encode(settings):
    """int32 [SETTINGS_BYTES]: the settings as JSON bytes, zero-padded."""
    text = json.dumps(settings, sort_keys=True).encode()
    # An internal bound: the suite's settings are a few hundred bytes.
    assert len(text) <= SETTINGS_BYTES, len(text)
    codes = np.zeros([SETTINGS_BYTES], np.int32)
    codes[: len(text)] = np.frombuffer(text, np.uint8)
    return codes


def decode(codes):
    return json.loads(bytes(codes[codes > 0].astype(np.uint8)).decode())


def _all_gather(target, task, codes, wait_secs):
    num_workers = task.num_workers
    with tf.Graph().as_default() as graph:
        device = "/job:worker/replica:0/task:%d/device:CPU:0" % task.task_index
        with tf.device(device):
            gathered = tf.raw_ops.CollectiveGatherV2(
                input=tf.constant(codes),
                group_size=num_workers,
                group_key=GROUP_KEY,
                instance_key=INSTANCE_KEY,
                ordering_token=[],
            )
        with (
            ps.ends_after(wait_secs, task, "the agreement on the settings"),
            tf.compat.v1.Session(target, graph=graph) as session,
        ):
            try:
                flat = session.run(gathered)
            except (
                tf.errors.FailedPreconditionError,
                tf.errors.InternalError,
            ) as e:
                line = refused_by_leader(task, e.message)
                if line is None:
                    raise
                raise ValueError(line) from None
    return np.split(flat, num_workers)


# How the group's leader (worker task 0) refuses a worker into a group it
# formed with other workers (TensorFlow 2.21's words): the worker is not
# the process of its task index the group holds (or none), or the group is
# of another size.
_OTHER_PROCESS = re.compile(r"current incarnation doesn't match")
_OTHER_SIZE = re.compile(
    r"joining a group with size ?(\d+), but that group has size (\d+)"
)


def refused_by_leader(task, message):
    """The line of a worker (task) whose agreement the group's leader
    refused (message: TensorFlow's error), or None for another error.

    A worker of another job whose --worker_hosts name a running job's
    chief: that job trains on, its leader keeps the group it formed.
    """
    leader = task.cluster.task_address("worker", 0)
    mine = ",".join(task.cluster.job_tasks("worker"))
    size = _OTHER_SIZE.search(message)
    if size:
        found = (
            "worker task 0 (%s) leads a group of %s workers, not the %s of "
            "this worker's --worker_hosts %s: a job of other --worker_hosts "
            "runs there" % (leader, size[2], size[1], mine)
        )
    elif _OTHER_PROCESS.search(message):
        found = (
            "worker task 0 (%s) leads a group of workers formed without this"
            " one: a job runs there whose --worker_hosts are not this "
            "worker's %s, or this worker restarted alone under its running "
            "peers" % (leader, mine)
        )
    else:
        return None
    return (
        "worker task %d: %s; this worker is not one of that job's, which "
        "trains on: give this job workers of its own (ports no job uses in "
        "--worker_hosts), or stop every worker of that job and start them "
        "all again (docs/cluster.md)" % (task.task_index, found)
    )


# The values a flag gives a meaning to, as the line says them.
_MEANINGS = {("learning_rate", "0.0"): "0 (the model's own recipe)"}


def said(name, value):
    """A setting's value as a line says it: its JSON, or its meaning."""
    text = json.dumps(value)
    return _MEANINGS.get((name, text), text)


def differing_names(settings_of_tasks):
    """The sorted names whose JSON differs; a missing name differs too."""
    return [
        name
        for name in sorted(set().union(*settings_of_tasks))
        if len({json.dumps(s.get(name)) for s in settings_of_tasks}) > 1
    ]


def difference(settings_of_tasks, tasks=None):
    """The line naming every flag that differs between workers, or None.

    The model's code is named only when every flag agrees (a different
    --model or model flag changes it too, and the flags are what to fix).
    tasks: the worker task index of each dict; None for 0, 1, ...
    """
    tasks = range(len(settings_of_tasks)) if tasks is None else tasks
    differing = {}
    for name in differing_names(settings_of_tasks):
        differing[name] = ", ".join(
            "worker task %d has %s" % (i, said(name, s.get(name)))
            for i, s in zip(tasks, settings_of_tasks)
        )
    model = [
        (name, differing.pop(name))
        for name in (VARIABLES, OPS)
        if name in differing
    ]
    if len(differing) > 1:
        listed = ", ".join(
            "--%s (%s)" % (name, values) for name, values in differing.items()
        )
        return (
            "%d flags differ between the workers: %s; start every worker "
            "with the same flags (docs/cluster.md)" % (len(differing), listed)
        )
    if differing:
        [(name, values)] = differing.items()
        return (
            "--%s differs between the workers: %s; start every worker with "
            "the same --%s (docs/cluster.md)" % (name, values, name)
        )
    if model:
        name, values = model[0]
        return (
            "%s differ between the workers: %s; every worker must run "
            "the same model code (docs/cluster.md)" % (name, values)
        )
    return None


# What a restarted chief may change: where it stops, not what it learns.
RESTART_MAY_CHANGE = ("max_steps",)
POLL_SECS = 0.5


def held_job(task, config, wait_secs):
    """The settings dict the ps tasks' chief published, or None (a new ps);
    waits at most wait_secs (0: no bound) for ps task 0 to start."""
    address = task.cluster.task_address("ps", 0)
    deadline = time.time() + wait_secs
    while not ps.responds(address):
        if wait_secs and time.time() > deadline:
            raise errors.TrainingError(
                "worker task %d: no answer from ps task 0 (%s) within %d s "
                "of start-up (--operation_timeout_secs): %s; start the ps "
                "tasks, or look in their output for why they ended"
                % (task.task_index, address, wait_secs, ps.probe(address))
            )
        time.sleep(POLL_SECS)
    return jobs.read_published(address, config.operation_timeout_in_ms)


def refuse_other_job(held, settings, ps_address):
    """ValueError when the ps tasks hold another job, or this job under
    other settings.

    held, settings: the published settings and this chief's, each with
    its job (`jobs.KEY`). A chief restarted with other flags under running
    workers would train at other settings; the ps tasks of another job
    would hand that job's variables to this one.
    """
    held, held_job = _without_job(held)
    settings, job = _without_job(settings)
    if not jobs.same(held_job, job):
        raise ValueError(jobs.other_job_line(held_job, job, ps_address))
    if held.get(jobs.STARTING):
        return  # A chief of the job started and ended before it published.
    names = [
        name
        for name in differing_names([held, settings])
        if name not in RESTART_MAY_CHANGE
    ]
    if not names:
        return
    differing = ", ".join(
        "%s (the job's chief has %s, this chief %s)"
        % (
            name if name == VARIABLES else "--" + name,
            said(name, held.get(name)),
            said(name, settings.get(name)),
        )
        for name in names
    )
    raise ValueError(
        "the ps tasks hold a job started by a chief with other flags: %s; "
        "start this chief with that job's flags to rejoin it, or stop every "
        "task of that job, its ps tasks too, to start a new one "
        "(docs/cluster.md)" % differing
    )


def _without_job(published):
    """(the settings, the job) of a published dict."""
    settings = dict(published)
    return settings, settings.pop(jobs.KEY, None)


def joins_held_job(task, config, settings):
    """Whether the chief joins the job the ps tasks hold.

    A chief restarted under running workers, or whose ps tasks outlived
    their workers, takes their variables as they are, newer than any
    checkpoint; one of another job, or of other settings, is refused
    before it runs an op on the ps.
    """
    held = held_job(task, config, sessions.timeout_secs(config))
    if held is None:
        return False
    address = task.cluster.task_address("ps", 0)
    refuse_other_job(held, settings, address)
    jobs.mark_starting(
        address, config.operation_timeout_in_ms, settings[jobs.KEY]
    )
    print(
        "the ps tasks hold this job already: training on from their "
        "variables, restoring no checkpoint",
        flush=True,
    )
    return True


class PsAgreementHook(tf.compat.v1.train.SessionRunHook):
    """Publishes the chief's settings and job; checks another worker's
    settings against them.

    settings: the chief's with its job (`jobs.KEY`), which it records in
    train_dir as it publishes; wait_secs: how long a worker waits for the
    chief's settings (0: no bound); done_ops (`ps.done_signals`): run by
    a worker that differs.
    """

    def __init__(self, task, settings, wait_secs, done_ops, train_dir=None):
        self._task = task
        self._settings = settings
        self._wait_secs = wait_secs
        self._done = done_ops
        self._train_dir = train_dir

    def begin(self):
        self._published, self._ready = jobs.published_variable()
        self._text = tf.compat.v1.placeholder(tf.string, [])
        self._publish = tf.compat.v1.assign(
            self._published, self._text, validate_shape=False
        )
        self._read = self._published.read_value()

    def after_create_session(self, session, coord):
        if self._task.is_chief:
            settings, job = _without_job(self._settings)
            settings[jobs.KEY] = jobs.started(job, self._train_dir)
            text = json.dumps(settings, sort_keys=True)
            session.run(self._publish, {self._text: text})
            return
        chief, _ = _without_job(self._wait_for_chief(session))
        line = difference(
            [chief, self._settings], tasks=[0, self._task.task_index]
        )
        if line is not None:
            # The ps need not wait for a worker that leaves.
            session.run(self._done)
            raise ValueError(line)

    def _wait_for_chief(self, session):
        """The chief's publication, once a chief that answers made it.

        Its port is looked at first: a chief restarted under this worker
        clears the publication (`jobs.STARTING`) before its server
        starts, so one read after it answered is its own, never that of
        a chief gone before (ps tasks left from an earlier job).
        """
        chief = self._task.cluster.task_address("worker", 0)
        deadline = time.time() + self._wait_secs
        while True:
            if ps.responds(chief) and session.run(self._ready):
                published = json.loads(session.run(self._read).decode())
                if not published.get(jobs.STARTING):
                    return published
            if self._wait_secs and time.time() > deadline:
                raise errors.TrainingError(
                    "worker task %d: the chief (worker task 0) did not "
                    "publish its settings on ps task 0 within %d s "
                    "(--operation_timeout_secs); start the chief, or look "
                    "in its output for why it ended"
                    % (self._task.task_index, self._wait_secs)
                )
            time.sleep(POLL_SECS)


def refuse_stray_worker(task, config):
    """ValueError for a worker other than the chief whose place the job
    of the ps tasks (if they run) gives another address; before its
    server starts."""
    address = task.cluster.task_address("ps", 0)
    if not ps.responds(address):
        return
    held = jobs.read_published(address, config.operation_timeout_in_ms)
    line = held and jobs.stray_worker_line(held, task)
    if line:
        raise ValueError(line)
