"""Where the variables live, which copy each tower reads, and how the
towers' gradients update them: the variable update (tf_cnn_benchmarks'
variable manager), one small table of functions per --variable_update mode.

A step calls it in the order the step runs (`variable_update`,
`tower_plan`, `tower_gradients` in each tower, `update_waits`,
`reduce_gradients`, `apply_gradients`), and it calls nothing back.

parameter_server (the TF1 design): one copy of every variable on
`variable_device`; each tower reads it and sends its gradients there, where
they are averaged and applied once.

replicated: tower 0 holds the variables under the tutorial's names on its
own device (the copy the Saver, the moving averages and the summaries
see); tower i > 0 holds its own copy of each, 'replica_i/<name>', on its
device. The gradients are all-reduced (`all_reduce`) and each tower applies
the mean to its own copy, in one `apply_gradients` call, so one global step
and one loss-scale update count the step.

ACROSS_WORKERS, replicated in a cluster of workers only: a copy on every
tower of every worker, the gradients all-reduced across all (`collectives`),
the chief's values at the start, the last worker's statistics committed;
every variable the step writes, the losses' averages too, waits for every
collective of the step (`gradient_reduction.all_or_none`).

A copy is made by the model's own `get_variable` call, run again under the
copy's name (a custom getter that passes on every argument the model gave:
initializer, regularizer, constraint, ...): each copy carries its own
regularization term into its tower's loss, and the optimizer applies the
constraint to every copy. Copies, and the optimizer's slots of them, are
local variables, left out of checkpoints; the local init op, which runs
after the variables are restored or initialised, gives every copy the
value of the variable it copies, so all copies start equal and, updated
alike, stay equal.

Statistics (the non-trainable variables, such as batch-norm moving means):
the last tower's, committed to the variable and every copy after the
update (`gradient_reduction.commit_statistics`).
"""

import collections

import tensorflow as tf

from multigpu.graph import (
    all_reduce,
    collectives,
    gradient_reduction,
    placement,
    towers,
)


VARIABLE_UPDATES = ("parameter_server", "replicated")
# The table's row of --variable_update=replicated in a cluster of workers only.
ACROSS_WORKERS = "replicated_across_workers"

VariableUpdate = collections.namedtuple(
    "VariableUpdate",
    "mode devices variable_device all_reduce keys task pack_bytes "
    "transfer_dtype",
    defaults=(None, 0, tf.float32),
)
VariableUpdate.__doc__ = """The variable update of a run.

mode: the row of the table: one of VARIABLE_UPDATES, or ACROSS_WORKERS.
devices: the tower device strings.
variable_device: str, where the variables live (replicated: tower 0's copy).
all_reduce: 'nccl', 'collective' or 'one_device' if replicated, else None.
keys: the `all_reduce.CollectiveKeys` of the graph's collective ops.
task: the `cluster.ClusterTask` of ACROSS_WORKERS, whose all-reduces join
  every tower of every worker (`collectives`); else None.
pack_bytes: int, --gradient_pack_bytes (ACROSS_WORKERS only).
transfer_dtype: the `tf.DType` of --gradient_transfer_dtype, which the
  float32 gradients cross the workers in (ACROSS_WORKERS only).
"""

TowerVariables = collections.namedtuple(
    "TowerVariables", "index device variable_device getter copies"
)
TowerVariables.__doc__ = """What one tower reads (`tower_plan`).

index: int, the tower's index.
device: str, where the tower computes.
variable_device: str, where the tower's variable ops go
  (`placement.device_function`).
getter: a `tf.compat.v1.variable_scope` custom getter that gives the tower
  its own copies, or None for a tower that reads the variables themselves.
copies: dict, variable name -> the tower's own copy, filled as the tower's
  model is built.
"""


Workers = collections.namedtuple(
    "Workers", "task pack_bytes transfer_dtype", defaults=(0, tf.float32)
)
Workers.__doc__ = """The cluster of workers only that a replicated update
all-reduces across: task, the worker's `cluster.ClusterTask`; pack_bytes,
--gradient_pack_bytes; transfer_dtype, --gradient_transfer_dtype (a
`tf.DType` or its name)."""


def variable_update(
    mode,
    devices,
    variable_device_choice="cpu",
    all_reduce_spec="auto",
    places_variables=True,
    workers=None,
):
    """The variable update of the --variable_update flag's mode.

    Args:
      mode: one of VARIABLE_UPDATES.
      devices: the tower device strings.
      variable_device_choice: --variable_device (parameter_server only).
      all_reduce_spec: --all_reduce_spec (replicated only).
      places_variables: bool, False in a cluster whose device setter puts
        the variables on the ps tasks (`placement.variable_device`).
      workers: the `Workers` of a cluster of workers only, else None.

    Raises:
      ValueError: an unknown mode or choice.
    """
    if mode not in VARIABLE_UPDATES:
        raise ValueError(
            "--variable_update must be one of %s, got %r"
            % (", ".join(VARIABLE_UPDATES), mode)
        )
    if mode == "parameter_server":
        return parameter_server(
            devices,
            placement.variable_device(
                variable_device_choice, devices, places_variables
            ),
        )
    keys = all_reduce.CollectiveKeys()
    if workers is None:
        method = all_reduce.algorithm(all_reduce_spec, devices)
        return VariableUpdate("replicated", devices, devices[0], method, keys)
    return VariableUpdate(
        ACROSS_WORKERS,
        devices,
        devices[0],
        "collective",
        keys,
        workers.task,
        workers.pack_bytes,
        tf.as_dtype(workers.transfer_dtype),
    )


def parameter_server(devices, variable_device=placement.VARIABLE_DEVICE):
    """The TF1 design: one copy on variable_device."""
    return VariableUpdate(
        "parameter_server",
        devices,
        variable_device,
        None,
        all_reduce.CollectiveKeys(),
    )


def _copies_every_variable(index):
    """Replicated: every tower after the first copies every variable."""
    return index > 0


def _copies_no_weights(index):
    """parameter_server: the towers read the variables themselves."""
    return False


def _own_device(update, index):
    return update.devices[index]


def _shared_device(update, index):
    return update.variable_device


def tower_plan(update):
    """What each tower reads: a list of `TowerVariables`, one per tower.

    Tower 0 creates the variables. The last tower copies the statistics
    (the non-trainable variables) it updates; in replicated mode every
    tower after the first copies every variable.
    """
    mode = _MODES[update.mode]
    last = len(update.devices) - 1
    plan = []
    for index, device in enumerate(update.devices):
        copies = {}
        weights = mode.copies_weights(index)
        getter = None
        if weights or index == last:
            getter = _copying_getter(index, weights, copies)
        plan.append(
            TowerVariables(
                index,
                device,
                mode.variable_device(update, index),
                getter,
                copies,
            )
        )
    return plan


def _copying_getter(index, weights, copies):
    """A custom getter: the tower's own copy, made by the model's call.

    Args:
      index: int, the tower's index.
      weights: bool, copy the trainable variables too, not only the
        statistics.
      copies: dict to record each copy in, by the variable's name.
    """

    def copying_getter(getter, name, *args, **kwargs):
        if kwargs.get("partitioner") is not None:
            raise ValueError(
                "%s is a partitioned variable (get_variable with a "
                "partitioner), which the towers do not support; create it "
                "without a partitioner" % name
            )
        variable = getter(name, *args, **kwargs)
        if not (weights or not variable.trainable):
            return variable
        # The model's own arguments, for a local variable of another name.
        kwargs.update(
            trainable=False,
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
            reuse=tf.compat.v1.AUTO_REUSE,
        )
        copy = getter(towers.replica_name(index, name), *args, **kwargs)
        copies[variable.op.name] = copy
        return copy

    return copying_getter


def reduce_gradients(update, tower_grads):
    """The synchronisation point: every tower's gradients, reduced.

    Args:
      update: the `VariableUpdate`, whose mode's row picks the reduction.
      tower_grads: list (one per tower) of lists of (gradient, variable),
        in the same variable order.

    Returns:
      A list of lists of (gradient, variable), one per copy of the
      variables: for parameter_server one list, the mean on
      `variable_device`; for replicated (across the workers too) one per
      tower, the mean on its own device, paired with its own copy.
    """
    return _MODES[update.mode].reduce(update, tower_grads)


def update_waits(update, make):
    """The losses' averages, which the update waits for (they read the
    global step it increments), made where the mode's row makes them.

    Args:
      update: the `VariableUpdate`.
      make: callable() -> the op that updates the averages.

    Returns:
      (made, later): on one machine [make()'s op], made now for the
      gradients to wait for as they are reduced, and None; in
      ACROSS_WORKERS [] and make, which `apply_gradients` (its later)
      calls behind every collective of the step, so that a step a lost
      peer cuts short moves no average (`gradient_reduction.all_or_none`).
    """
    return _MODES[update.mode].waits(make)


Statistics = collections.namedtuple("Statistics", "updates applied")
Statistics.__doc__ = """The statistics a step's update commits.

updates: the ops that update the last tower's statistics
  (`towers.batch_norm_updates` of its scope).
applied: bool scalar, whether the step is applied
  (`step_optimizer.step_applied`).
"""


def apply_gradients(update, plan, opt, reduced, statistics, later=None):
    """The step's update: the gradients, then the statistics.

    Args:
      update: the `VariableUpdate`.
      plan: the `tower_plan` the towers were built with.
      opt: the optimizer; its `apply_gradients` increments the global
        step (int64 scalar variable) once.
      reduced: the lists of `reduce_gradients` (each maybe clipped).
      statistics: the `Statistics` of the step.
      later: `update_waits`' callable, made behind the mode's gate, or
        None.

    Returns:
      The op of the update. Its local init op (`_local_init_op`) is in the
      LOCAL_INIT_OP collection, where a `Scaffold` (or, in a plain
      `Session`, `sessions.local_init_op`) finds it.
    """
    reduced, committed = _MODES[update.mode].gate(
        update, plan, reduced, statistics, later
    )
    # The optimizer's slots of a copy are the copy's: local variables.
    with tf.variable_creator_scope(_local_if_a_copy):
        apply_op = opt.apply_gradients(
            [pair for grads in reduced for pair in grads],
            global_step=tf.compat.v1.train.get_global_step(),
        )
    with tf.control_dependencies([apply_op, *statistics.updates]):
        commit = gradient_reduction.commit_statistics(plan, *committed())
    tf.compat.v1.add_to_collection(
        tf.compat.v1.GraphKeys.LOCAL_INIT_OP, _local_init_op(update)
    )
    return tf.group(apply_op, commit, name="apply")


def _local_if_a_copy(next_creator, **kwargs):
    if towers.primary_name(kwargs.get("name") or "") is not None:
        kwargs["collections"] = [tf.compat.v1.GraphKeys.LOCAL_VARIABLES]
        kwargs["trainable"] = False
    return next_creator(**kwargs)


def _local_init_op(update):
    """Initialises the local variables, then copies the variables' values.

    The Scaffold takes the LOCAL_INIT_OP collection as its local init op,
    which a session runs after restoring or initialising the global
    variables (and then taking the mode's start values,
    `_Mode.start_values`): every copy then equals what was restored.
    """
    initialise = _MODES[update.mode].start_values(
        update, tf.compat.v1.train.Scaffold.default_local_init_op()
    )
    variables = {var.op.name: var for var in tf.compat.v1.global_variables()}
    assigns = []
    with tf.control_dependencies([initialise]):
        for copy in tf.compat.v1.local_variables():
            name = towers.primary_name(copy.op.name)
            if name is not None:
                with tf.device(copy.device):
                    assigns.append(copy.assign(variables[name].read_value()))
    return tf.group(initialise, *assigns, name="copy_variables")


def describe(update):
    """The dry run's lines of the update: a dict of name -> value."""
    return _MODES[update.mode].describe(update)


def _own_start(update, initialise):
    """One machine: the values restored or initialised."""
    return initialise


def _chief_start(update, initialise):
    """ACROSS_WORKERS: after initialise, every worker takes the chief's
    values of the global variables."""
    with tf.control_dependencies([initialise]):
        return collectives.chief_values(
            tf.compat.v1.global_variables(),
            update.task,
            update.keys,
            update.devices[0],
        )


def _describe_parameter_server(update):
    return {
        "variable_update": update.mode,
        "variable_device": update.variable_device,
    }


def _describe_replicated(update):
    return {
        "variable_update": "%s (tower 0's copy on %s, one on every tower)"
        % (update.mode, update.variable_device),
        "all_reduce": update.all_reduce,
    }


def _describe_across_workers(update):
    num_workers = update.task.num_workers
    return {
        "variable_update": "replicated across %d workers (a copy on every "
        "tower of every worker)" % num_workers,
        "all_reduce": "collective ring of %d devices, gradients packed in "
        "pieces of about %d bytes, sent as %s"
        % (
            num_workers * len(update.devices),
            update.pack_bytes,
            update.transfer_dtype.name,
        ),
    }


_Mode = collections.namedtuple(
    "_Mode",
    "copies_weights variable_device reduce waits gate start_values "
    "describe",
)
# The table of the modes, a row each: whether tower
# index copies the weights, and where its variable ops go; the gradients'
# reduction (`gradient_reduction`); where the losses' averages are made
# (`update_waits`); what the update waits for, and the statistics every copy
# takes (`gradient_reduction`); the copies' start; the dry run's lines.
_MODES = {
    "parameter_server": _Mode(
        _copies_no_weights,
        _shared_device,
        gradient_reduction.on_variable_device,
        gradient_reduction.made_now,
        gradient_reduction.no_gate,
        _own_start,
        _describe_parameter_server,
    ),
    "replicated": _Mode(
        _copies_every_variable,
        _own_device,
        gradient_reduction.between_towers,
        gradient_reduction.made_now,
        gradient_reduction.no_gate,
        _own_start,
        _describe_replicated,
    ),
    ACROSS_WORKERS: _Mode(
        _copies_every_variable,
        _own_device,
        gradient_reduction.across_workers,
        gradient_reduction.made_behind_the_gate,
        gradient_reduction.across_workers_gate,
        _chief_start,
        _describe_across_workers,
    ),
}


def tower_gradients(opt, loss, tower):
    """The tower's gradient of each trainable variable, for its own copy,
    the gradient of every copy it reads counted.

    A tower's loss may read other copies than its own: a weight decay
    written over `tf.compat.v1.trainable_variables()` (TensorFlow's
    official ResNet's) reads tower 0's variables from every tower. Every
    copy holds the variable's value, so the loss's gradient of the variable
    is the sum of its gradients of every copy it reads; of its own copy
    only, the reduced gradient would carry 1/N of that decay. A loss that
    reads its own copies only takes `opt.compute_gradients`' gradients.

    Args:
      opt: the towers' optimizer (maybe loss-scaled).
      loss: float32 scalar, the tower's total loss.
      tower: the tower's `TowerVariables`, its model built.

    Returns:
      A list of (gradient, the copy the tower reads), one per variable of
      `tf.compat.v1.trainable_variables()`, in its order; the gradient is
      None where the loss reads no copy of the variable.
    """
    trainable = tf.compat.v1.trainable_variables()
    names = [var.op.name for var in trainable]
    # The trainable variables as the tower reads them: its copy or the
    # variable.
    own = [tower.copies.get(var.op.name, var) for var in trainable]
    others = [
        var
        for var in towers.model_variables_with_copies(loss.graph)
        if all(var is not each for each in own)
    ]
    read = {name: [] for name in names}
    for grad, var in opt.compute_gradients(loss, own + others):
        if grad is not None:
            read[towers.primary_name(var.op.name) or var.op.name].append(
                grad
            )
    return [(_sum(read[name]), var) for name, var in zip(names, own)]


def _sum(grads):
    """The sum of a variable's gradients; None for none, one as it is."""
    if len(grads) <= 1:
        return grads[0] if grads else None
    return tf.math.add_n([tf.convert_to_tensor(grad) for grad in grads])
