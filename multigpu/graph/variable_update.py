"""Where the variables live and how the towers' gradients update them.

The one place that chooses between the two modes of --variable_update
(tf_cnn_benchmarks calls this the variable manager); the trainers pass the
flag's value to `variable_update` and call the same functions in both
modes:

  tower_copies(update)               for `towers.build_towers`: the copy
                                     of the variables each tower reads
  reduce_gradients(update, grads)    the synchronisation point
  batch_norm_updates(update, scope)  the batch-norm statistics' update
  apply_gradients(update, ...)       the step's update

parameter_server (the TF1 design): one copy of every variable on
`variable_device`; each tower reads it and sends its gradients there,
where they are averaged and applied once.

replicated: tower 0 holds the variables under the tutorial's names on its
own device (the copy the Saver, the moving averages and the summaries
see); tower i > 0 holds a copy of each, 'replica_i/<name>', on its device.
The gradients are all-reduced (`all_reduce`), and each tower applies the
mean to its own copy, in one `apply_gradients` call, so one global step
and one loss-scale update count the step. The copies, and the optimizer's
slots of them, are local variables, left out of every checkpoint: the
local init op, which runs after a checkpoint is restored or the variables
are initialised, sets each copy to tower 0's value, so all copies start
equal and, updated alike, stay equal. Batch-norm moving statistics are
kept per copy too: the last tower updates its copy from its batch's
statistics (as parameter_server runs the last tower's updates), and every
other copy then takes that value, so all copies, and the checkpoint, hold
the statistics parameter_server would.
"""

import collections
import contextlib

import tensorflow as tf

from multigpu.graph import all_reduce, placement, towers

VARIABLE_UPDATES = ("parameter_server", "replicated")

# Tower i's copies are named REPLICA_SCOPE_i/<the variable's name>.
REPLICA_SCOPE = "replica"

VariableUpdate = collections.namedtuple(
    "VariableUpdate", "mode devices variable_device all_reduce"
)
VariableUpdate.__doc__ = """The variable update of a run.

mode: one of VARIABLE_UPDATES.
devices: the tower device strings.
variable_device: str, where the variables (tower 0's copy, if replicated)
  live.
all_reduce: 'nccl', 'collective' or 'one_device' if replicated, else None.
"""


def variable_update(
    mode,
    devices,
    variable_device_choice="cpu",
    all_reduce_spec="auto",
    task=None,
):
    """The variable update of the --variable_update flag's mode.

    Args:
      mode: one of VARIABLE_UPDATES.
      devices: the tower device strings.
      variable_device_choice: --variable_device (parameter_server only).
      all_reduce_spec: --all_reduce_spec (replicated only).
      task: the `cluster.ClusterTask`, or None outside a cluster.

    Raises:
      ValueError: an unknown mode or choice, or replicated in a cluster.
    """
    if mode not in VARIABLE_UPDATES:
        raise ValueError(
            "--variable_update must be one of %s, got %r"
            % (", ".join(VARIABLE_UPDATES), mode)
        )
    if mode == "parameter_server":
        return VariableUpdate(
            mode,
            devices,
            placement.variable_device(variable_device_choice, devices, task),
            None,
        )
    if task is not None and task.cluster is not None:
        raise ValueError(
            "--variable_update=replicated does not run in cluster mode yet; "
            "use --variable_update=parameter_server"
        )
    method = all_reduce.algorithm(all_reduce_spec, devices)
    return VariableUpdate(mode, devices, devices[0], method)


def parameter_server(devices, variable_device=placement.VARIABLE_DEVICE):
    """The TF1 design: one copy on variable_device."""
    return VariableUpdate("parameter_server", devices, variable_device, None)


def replica_name(index, name):
    """'replica_<index>/<name>': the name of tower index's copy of name."""
    return "%s_%d/%s" % (REPLICA_SCOPE, index, name)


def primary_name(name):
    """The name of the variable a copy copies, or None for no copy."""
    head, _, rest = name.partition("/")
    prefix, _, index = head.rpartition("_")
    if prefix == REPLICA_SCOPE and index.isdigit() and rest:
        return rest
    return None


def tower_copies(update):
    """The `towers.TowerCopies` of the update's mode.

    In replicated mode each tower's variable ops go to its own device, and
    every variable that tower i > 0 gets is its own copy, made at the first
    get, whose gradients it takes; otherwise every tower gets the one copy
    on `variable_device`.
    """
    if update.mode == "parameter_server":
        return towers.shared_variables(update.variable_device)
    return towers.TowerCopies(
        _replica_scope, _replica_variables, lambda index: update.devices[index]
    )


def _replica_scope(index):
    if index == 0:
        return contextlib.nullcontext()
    return tf.compat.v1.variable_scope(
        tf.compat.v1.get_variable_scope(), custom_getter=_replica_getter(index)
    )


def _replica_getter(index):
    def replica_getter(getter, name, *args, **kwargs):
        # Tower 0's variable, got again: the copy has its shape and dtype.
        primary = getter(name, *args, **kwargs)
        # The local init op gives the copy tower 0's value (`_copy_op`).
        return getter(
            replica_name(index, name),
            shape=primary.shape,
            dtype=primary.dtype.base_dtype,
            initializer=tf.compat.v1.zeros_initializer(),
            trainable=False,
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
            reuse=tf.compat.v1.AUTO_REUSE,
        )

    return replica_getter


def _replica_variables(index):
    """Tower index's copies of the trainable variables, in their order."""
    if index == 0:
        return None
    copies = {
        var.op.name: var
        for var in tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.LOCAL_VARIABLES
        )
    }
    return [
        copies[replica_name(index, var.op.name)]
        for var in tf.compat.v1.trainable_variables()
    ]


def reduce_gradients(update, tower_grads):
    """The synchronisation point: every tower's gradients, reduced.

    Args:
      update: the `VariableUpdate`.
      tower_grads: list (one per tower) of lists of (gradient, variable),
        in the same variable order.

    Returns:
      A list of lists of (gradient, variable), one per copy of the
      variables: for parameter_server one list, the mean on
      `variable_device`; for replicated one per tower, the mean on its own
      device, paired with its own copy.
    """
    if update.mode == "parameter_server":
        return [towers.average_gradients(tower_grads, update.variable_device)]
    return all_reduce.all_reduce_mean(
        tower_grads, update.devices, update.all_reduce
    )


def batch_norm_updates(update, scope):
    """The ops that update the batch-norm statistics with every step.

    Args:
      update: the `VariableUpdate`.
      scope: str, the last tower's name scope.

    Returns:
      A list of ops (empty for a model without batch norm): the last
      tower's update ops (`towers.batch_norm_updates`), and in replicated
      mode, after them, the copy of its statistics to the other towers'.
    """
    updates = towers.batch_norm_updates(scope)
    num_towers = len(update.devices)
    if update.mode == "parameter_server" or num_towers == 1 or not updates:
        return updates
    local = {
        var.op.name: var
        for var in tf.compat.v1.get_collection(
            tf.compat.v1.GraphKeys.LOCAL_VARIABLES
        )
    }
    copies = []
    for var in tf.compat.v1.moving_average_variables():
        if var.trainable or primary_name(var.op.name) is not None:
            continue
        name = var.op.name
        others = [local[replica_name(i, name)] for i in range(1, num_towers)]
        with tf.control_dependencies(updates):
            value = others[-1].read_value()
        for copy in [var] + others[:-1]:
            with tf.device(copy.device):
                copies.append(copy.assign(value).op)
    return copies


def apply_gradients(update, copies_grads, apply_fn):
    """Applies each copy's gradients in one step.

    Args:
      update: the `VariableUpdate`.
      copies_grads: the lists of `reduce_gradients` (each maybe clipped).
      apply_fn: callable(grads_and_vars) -> op, applies the gradients and
        increments the global step once, e.g. a closure over
        `opt.apply_gradients`.

    Returns:
      The op of the update.
    """
    if update.mode == "replicated":
        # The moving averages are of tower 0's variables only.
        _leave_copies_out(tf.compat.v1.GraphKeys.MOVING_AVERAGE_VARIABLES)
    apply_op = apply_fn([pair for grads in copies_grads for pair in grads])
    if update.mode == "replicated":
        _keep_copies_local()
        tf.compat.v1.add_to_collection(
            tf.compat.v1.GraphKeys.LOCAL_INIT_OP, _local_init_op()
        )
    return apply_op


def _keep_copies_local():
    """Moves the copies' optimizer slots out of the global variables.

    The optimizer makes a slot (e.g. Momentum's) of each copy a global
    variable; as a local one it stays out of checkpoints and takes tower 0's
    value at the local init.
    """
    for var in _leave_copies_out(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        tf.compat.v1.add_to_collection(
            tf.compat.v1.GraphKeys.LOCAL_VARIABLES, var
        )


def _leave_copies_out(key):
    """Removes the copies from the collection key; returns them."""
    members = tf.compat.v1.get_collection_ref(key)
    copies = [v for v in members if primary_name(v.op.name)]
    for var in copies:
        members.remove(var)
    return copies


def _local_init_op():
    """Initialises the local variables, then copies tower 0's values.

    The Scaffold takes the LOCAL_INIT_OP collection as its local init op,
    which a session runs after restoring or initialising the global
    variables: every copy then equals what was restored.
    """
    initialise = tf.compat.v1.train.Scaffold.default_local_init_op()
    with tf.control_dependencies([initialise]):
        return tf.group(_copy_op(), name="copy_tower_0_variables")


def _copy_op():
    """Assigns each copy the value of the variable it copies."""
    primaries = {var.op.name: var for var in tf.compat.v1.global_variables()}
    assigns = []
    for var in tf.compat.v1.local_variables():
        name = primary_name(var.op.name)
        if name is not None:
            with tf.device(var.device):
                assigns.append(var.assign(primaries[name].read_value()))
    return assigns


def describe(update):
    """The dry run's lines of the update: a dict of name -> value."""
    if update.mode == "parameter_server":
        return {
            "variable_update": update.mode,
            "variable_device": update.variable_device,
        }
    return {
        "variable_update": "%s (tower 0's copy on %s, one on every tower)"
        % (update.mode, update.variable_device),
        "all_reduce": update.all_reduce,
    }


def model_variables_with_copies(graph):
    """The trainable variables and the towers' copies of them."""
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = {var.op.name for var in trainable}
    copies = [
        var
        for var in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        if primary_name(var.op.name) in names
    ]
    return trainable + copies


def initialise(session):
    """Initialises the variables as a `MonitoredSession` does, in a plain
    `Session` (tests, benchmarks): the global variables, then the local init
    op (which gives the copies tower 0's values).
    """
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(local_init_op())


def local_init_op():
    """The op a `Scaffold` runs as its local init op, as it would choose."""
    return tf.compat.v1.train.Scaffold.get_or_default(
        "local_init_op",
        tf.compat.v1.GraphKeys.LOCAL_INIT_OP,
        tf.compat.v1.train.Scaffold.default_local_init_op,
    )
