"""Where the variables live, which copy each tower reads, and how the
towers' gradients update them (tf_cnn_benchmarks' variable manager): a
small table of functions per --variable_update mode.

replicated: tower 0 holds the variables, tower i > 0 a local copy
'replica_i/<name>', made by the model's own `get_variable` call (its
regularizer and constraint with it), out of checkpoints, given its
variable's value after a restore: updated alike, the copies stay equal.
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
VariableUpdate.__doc__ = """The variable update of a run: mode, a row of
`_MODES`; all_reduce, 'nccl', 'collective' or 'one_device' if replicated;
task, pack_bytes and transfer_dtype, ACROSS_WORKERS' `Workers`.
"""

TowerVariables = collections.namedtuple(
    "TowerVariables", "index device variable_device getter copies"
)
TowerVariables.__doc__ = """What one tower reads; copies (variable name ->
its copy) fills as its model is built."""


Workers = collections.namedtuple(
    "Workers", "task pack_bytes transfer_dtype", defaults=(0, tf.float32)
)
Workers.__doc__ = """The cluster of workers only a replicated update
all-reduces across; transfer_dtype, a `tf.DType` or its name."""


def variable_update(
    mode,
    devices,
    variable_device_choice="cpu",
    all_reduce_spec="auto",
    places_variables=True,
    workers=None,
):
    """places_variables: False where the device setter puts the variables
    on the ps tasks; workers, None outside a cluster of workers only."""
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


def tower_plan(update):
    """A list of `TowerVariables`, one per tower: tower 0 creates the
    variables, the last tower copies the statistics it updates, and in
    replicated mode every tower after the first copies every variable.
    """
    mode = _MODES[update.mode]
    last = len(update.devices) - 1
    plan = []
    for index, device in enumerate(update.devices):
        copies = {}
        weights = mode.own_copies and index > 0
        getter = None
        if weights or index == last:
            getter = _copying_getter(index, weights, copies)
        plan.append(
            TowerVariables(
                index,
                device,
                device if mode.own_copies else update.variable_device,
                getter,
                copies,
            )
        )
    return plan


def _copying_getter(index, weights, copies):
    """A custom getter that records tower index's copy of each
    variable (of the weights too, if weights) in copies."""

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
    """A list of (gradient, variable) per copy: parameter_server one, on
    `variable_device`; replicated one per tower, on its device and copy."""
    return _MODES[update.mode].reduce(update, tower_grads)


def update_waits(update, make):
    """(made, later): the losses' averages (make() -> their op), which
    the update waits for (they read the global step it increments): made now,
    ([op], None); or ACROSS_WORKERS, ([], make), made behind every collective
    of the step, so a step a lost peer cuts short moves no average.
    """
    return _MODES[update.mode].waits(make)


Statistics = collections.namedtuple("Statistics", "updates applied")
Statistics.__doc__ = """The last tower's statistics' update ops and the
bool scalar `step_optimizer.step_applied`."""


def apply_gradients(update, plan, opt, reduced, statistics, later=None):
    """The step's update: the reduced gradients (opt increments the
    global step once), then the statistics; the copies' init op goes in the
    LOCAL_INIT_OP collection, where a `Scaffold` finds it.
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
    """Initialises the local variables, then gives every copy its
    variable's value (run after a restore: the restored one)."""
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
    return _MODES[update.mode].describe(update)


def _own_start(update, initialise):
    return initialise


def _chief_start(update, initialise):
    """ACROSS_WORKERS: every worker takes the chief's values."""
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
    "own_copies reduce waits gate start_values describe",
)
# own_copies: every tower after the first holds its own copy of every
# variable, on its own device.
_MODES = {
    "parameter_server": _Mode(
        False,
        gradient_reduction.on_variable_device,
        gradient_reduction.made_now,
        gradient_reduction.no_gate,
        _own_start,
        _describe_parameter_server,
    ),
    "replicated": _Mode(
        True,
        gradient_reduction.between_towers,
        gradient_reduction.made_now,
        gradient_reduction.no_gate,
        _own_start,
        _describe_replicated,
    ),
    ACROSS_WORKERS: _Mode(
        True,
        gradient_reduction.across_workers,
        gradient_reduction.made_behind_the_gate,
        gradient_reduction.across_workers_gate,
        _chief_start,
        _describe_across_workers,
    ),
}


def tower_gradients(opt, loss, tower):
    """The tower's gradient of each trainable variable, for its own
    copy: list of (gradient or None, the copy it reads), in the order of
    `trainable_variables()`. A weight decay over `trainable_variables()`
    (TensorFlow's official ResNet's) reads tower 0's copy from every tower:
    each copy's gradient counts, or the reduced decay would be 1/N of it.
    """
    trainable = tf.compat.v1.trainable_variables()
    names = [var.op.name for var in trainable]
    own = [tower.copies.get(var.op.name, var) for var in trainable]
    others = [
        var
        for var in towers.model_variables_with_copies(loss.graph)
        if all(var is not each for each in own)
    ]
    read = {name: [] for name in names}
    for grad, var in opt.compute_gradients(loss, own + others):
        if grad is not None:
            read[towers.primary_name(var.op.name) or var.op.name].append(grad)
    return [(_sum(read[name]), var) for name, var in zip(names, own)]


def _sum(grads):
    if len(grads) <= 1:
        return grads[0] if grads else None
    return tf.math.add_n([tf.convert_to_tensor(grad) for grad in grads])
