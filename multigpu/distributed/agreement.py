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
the all-gather itself (`ps.ends_after`).

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
import time

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.distributed import ps, sessions
from multigpu.graph import summaries, towers

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
    """Waits until every other worker's port answers, at most wait_secs."""
    addresses = task.cluster.job_tasks("worker")
    waiting = set(range(len(addresses))) - {task.task_index}
    deadline = time.time() + wait_secs
    while waiting:
        waiting = {i for i in waiting if not ps.answers(addresses[i])}
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
                        "worker task %d (%s)" % (i, addresses[i])
                        for i in sorted(waiting)
                    ),
                    wait_secs,
                )
            )
        time.sleep(PORT_POLL_SECS)


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
            flat = session.run(gathered)
    return np.split(flat, num_workers)


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


# The chief's settings a worker read may be an earlier job's, left on the ps.
STALE_PS_NOTE = (
    "; worker task 0's are those published on ps task 0: if it now runs "
    "with other flags, the ps tasks are left from an earlier job, and "
    "every task of that job, its ps tasks too, must stop first"
)
# What a restarted chief may change: where it stops, not what it learns.
RESTART_MAY_CHANGE = ("max_steps",)
POLL_SECS = 0.5
# An absolute scope: the session block's, where the hook's `begin` runs.
VARIABLE_SCOPE = summaries.SESSION + "/"
VARIABLE_NAME = "chief_settings"


def _published_variable(text=""):
    """(string scalar variable, bool scalar tensor): the chief's settings
    on ps task 0 (text: the JSON its initializer sets), and whether any
    chief set them. One absolute name in every graph: any session on the
    cluster reads the one the ps holds."""
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
    """The settings dict the ps tasks' chief published, or None (a new ps);
    waits at most wait_secs (0: no bound) for ps task 0 to start."""
    address = task.cluster.task_address("ps", 0)
    deadline = time.time() + wait_secs
    while not ps.answers(address):
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
    """ValueError when the ps tasks hold a job of other settings.

    A chief restarted with other flags under running workers would train
    at other settings; the ps tasks of an earlier job, left running, would
    hand that job's settings to the new job's workers.
    """
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


def joins_held_job(target, task, config, settings):
    """Whether the chief joins the job the ps tasks hold.

    A chief restarted under running workers, or whose ps tasks outlived
    their workers, takes their variables as they are, newer than any
    checkpoint; one of other settings is refused before it restores.
    """
    held = held_job(target, task, config, sessions.timeout_secs(config))
    if held is None:
        return False
    refuse_other_job(held, settings)
    print(
        "the ps tasks hold this job already: training on from their "
        "variables, restoring no checkpoint",
        flush=True,
    )
    return True


class PsAgreementHook(tf.compat.v1.train.SessionRunHook):
    """Publishes the chief's settings; checks another worker's against them.

    wait_secs: how long a worker waits for the chief's settings (0: no
    bound); done_ops (`ps.done_signals`): run by a worker that differs.
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
        line = difference(
            [chief, self._settings], tasks=[0, self._task.task_index]
        )
        if line is not None:
            # The ps need not wait for a worker that leaves.
            session.run(self._done)
            raise ValueError(line + STALE_PS_NOTE)

    def _wait_for_chief(self, session):
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
