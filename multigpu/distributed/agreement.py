"""Agreement before step 1: the workers of a cluster compare their settings.

In a cluster of workers only every worker builds its own graph from its own
flags. Workers started with different flags would train apart (another
learning rate) or wait for each other forever (another tower count, other
collectives). Before the first step each worker sends its settings (a dict
of name -> JSON value: the flags that change the numbers, the model's
variables and ops) to every other, by one all-gather over the workers'
servers, and compares: a difference ends every worker with the same line,
naming the setting and each task's value.

Every wait is bounded: first the peers' ports (a worker whose graph failed
to build, or that never started, never opens its port), then the all-gather
itself (`ps.ends_after`).

In the ps cluster each worker compares with its chief. The workers share the
variables on the ps, but each builds its own graph from its own flags: a
worker started with another --learning_rate or --batch_size would move the
shared variables its own way, silently. Once its session is made, the chief
publishes its settings (JSON) in a string variable on ps task 0; every other
worker, once its own session is made and before its first step, reads them
(waiting for the chief at most the start-up wait) and compares them with its
own. A worker that differs tells the ps it is done and ends with
`difference`'s line, exit 1; the chief and the workers that agree train on,
as they would without it (asynchronous training needs no one worker). The
variable is in no collection: no checkpoint holds it, no init op sets it,
and a chief that starts again publishes its settings again.
"""

import hashlib
import json
import time

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.distributed import ps, sessions
from multigpu.graph import summaries, towers

# The bytes of one worker's settings, as JSON, padded to this length: the
# all-gather takes the same shape from every worker.
SETTINGS_BYTES = 16384
# The agreement's collective keys: apart from the training graph's, which
# count up from 1 (`all_reduce.CollectiveKeys`).
GROUP_KEY = 2**30
INSTANCE_KEY = 2**30
# Seconds between two looks at the peers' ports while they start.
PORT_POLL_SECS = 0.5
# The settings that stand for the model's code: its variables, and the
# ops of its first tower.
VARIABLES = "the model's variables"
OPS = "the model's ops"


def variables_digest(variables):
    """A short digest of the variables' names, shapes and dtypes.

    Args:
      variables: `tf.Variable`s, e.g. a graph's global variables.

    Returns:
      str, e.g. '24 variables, sha1 0a1b2c3d4e5f'.
    """
    described = sorted(
        "%s %s %s" % (v.op.name, v.shape, v.dtype.base_dtype.name)
        for v in variables
    )
    digest = hashlib.sha1("\n".join(described).encode()).hexdigest()[:12]
    return "%d variables, sha1 %s" % (len(described), digest)


def ops_digest(graph):
    """A short digest of the first tower's ops, by no name or device.

    The ops of tower 0's name scope (the model, its loss and gradients),
    but the staging of its batch (--prefetch_to_device, a worker's own),
    each by its type, its inputs' and outputs' dtypes and shapes and, for
    a number constant, its value: the names and devices, which differ
    between processes (a model's own scopes, each worker's task), are left
    out. Two model modules of the same variables but other ops (ReLU, or
    tanh times 3) differ.

    Args:
      graph: a `tf.Graph` built by `towers.tower`.

    Returns:
      str, e.g. '260 ops, sha1 0a1b2c3d4e5f'.
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
    """settings (a dict, or None) and the digests of the model's variables
    and ops."""
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
    """Returns once every worker of a cluster of workers only has the same
    settings (dict of str -> JSON value), or raises `difference`'s
    ValueError.

    wait_secs: float, the start-up wait, for the peers' ports (past it an
    `errors.TrainingError`), then for the all-gather (past it the process
    ends with one line); 0 waits forever.
    """
    wait_for_peers(task, wait_secs)
    gathered = _all_gather(target, task, encode(settings), wait_secs)
    line = difference([decode(codes) for codes in gathered])
    if line is not None:
        raise ValueError(line)


def wait_for_peers(task, wait_secs):
    """Waits until every other worker's port answers, at most wait_secs.

    Raises:
      errors.TrainingError: naming the workers whose port never answered.
    """
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
    """The settings dict of `encode`'s int32 codes."""
    return json.loads(bytes(codes[codes > 0].astype(np.uint8)).decode())


def _all_gather(target, task, codes, wait_secs):
    """Every worker's codes, in task order: a list of int32 arrays."""
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
    """A setting's value as a line says it: its JSON, or the meaning its
    flag gives that value (`_MEANINGS`)."""
    text = json.dumps(value)
    return _MEANINGS.get((name, text), text)


def differing_names(settings_of_tasks):
    """The names whose values (as JSON) differ between the settings dicts,
    sorted; a name one dict lacks differs from one it holds."""
    return [
        name
        for name in sorted(set().union(*settings_of_tasks))
        if len({json.dumps(s.get(name)) for s in settings_of_tasks}) > 1
    ]


def difference(settings_of_tasks, tasks=None):
    """The line naming every flag that differs between workers.

    The model's code is named only when every flag agrees (a different
    --model or model flag changes it too, and the flags are what to fix):
    its variables, or else its ops.

    Args:
      settings_of_tasks: list of dicts, worker task by worker task.
      tasks: the worker task index of each dict; None for 0, 1, ...

    Returns:
      str, e.g. "--learning_rate differs between the workers: worker task
      0 has 0.1, worker task 1 has 0.01; start every worker with the same
      --learning_rate (docs/cluster.md)", or for several flags "2 flags
      differ between the workers: --batch_size (worker task 0 has 4, ...),
      --learning_rate (...); start every worker with the same flags
      (docs/cluster.md)"; None when all agree.
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

    wait_secs: float, how long to wait for ps task 0 to start (0: no
    bound; past it an `errors.TrainingError`).
    """
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
    """Refuses a chief whose ps tasks hold a job of other settings.

    A chief restarted with other flags under running workers would train
    at other settings; the ps tasks of an earlier job, left running, would
    hand that job's settings to the new job's workers. It may change where
    it stops (RESTART_MAY_CHANGE). The ValueError names each setting that
    differs, both values, and what to do.
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

    A chief that finds the ps tasks holding a job of its own settings (it
    was restarted under running workers, or the ps tasks outlived their
    workers) takes the variables as they are, newer than any checkpoint,
    restoring nothing; one of other settings is refused before it restores
    anything (`refuse_other_job`).
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

    Args:
      task: the worker's `cluster.ClusterTask`, in a cluster with ps tasks.
      settings: dict of str -> JSON value (`agree`'s).
      wait_secs: float, how long a worker waits for the chief's settings
        (0: no bound, as --operation_timeout_secs=0).
      done_ops: the worker's enqueue ops, one per ps task, that tell the ps
        it is done (`ps.done_signals`); a worker that differs runs them.
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
