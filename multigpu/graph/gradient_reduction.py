"""The gradients' reduction, what the update waits for, and the statistics
every copy takes after it: the `reduce`, `waits` and `gate` columns of
`variable_update`'s table, one function per mode (tf_cnn_benchmarks'
variable manager owns its mode's reduction the same way).

The synchronisation point of a step: parameter_server averages the towers'
gradients on the variable device (`on_variable_device`,
`average_gradients`), replicated all-reduces them between the towers
(`between_towers`, `all_reduce`), and across the workers of a cluster of
workers only (`across_workers`, `collectives`), whose update waits for
every collective of its step (`all_or_none`).

Statistics (the non-trainable variables, such as batch-norm moving means):
in both modes the last tower updates its own copy from its batch (the
Inception trainer runs the last tower's updates only), and the step then
commits that value to the variable and every copy, unless the step is not
applied (`step_optimizer.step_applied`): a step skipped by loss scaling
leaves every statistic as it was.
"""

import functools

import tensorflow as tf

from multigpu.graph import all_reduce, collectives, placement


def on_variable_device(update, tower_grads):
    """parameter_server: the towers' mean on update.variable_device.

    Args:
      update: the `variable_update.VariableUpdate`.
      tower_grads: list (one per tower) of lists of (gradient, variable),
        in the same variable order.

    Returns:
      [list of (gradient, variable)]: one list, `average_gradients`'.
    """
    return [average_gradients(tower_grads, update.variable_device)]


def between_towers(update, tower_grads):
    """replicated: the towers' mean, all-reduced onto every tower's copy.

    Args: as `on_variable_device`'s.

    Returns:
      A list (one per tower) of lists of (gradient, variable): the mean on
      the tower's device, paired with the tower's own copy.
    """
    return all_reduce.all_reduce_mean(
        tower_grads, update.devices, update.all_reduce, update.keys
    )


def across_workers(update, tower_grads):
    """replicated across the workers: the mean of every tower of every
    worker, on each tower's copy; the update waits for it and for the
    step's other collectives (`all_or_none`).

    Args, Returns: as `between_towers`'s; update.task is the worker's
    `cluster.ClusterTask`.
    """
    return collectives.all_reduce_mean(
        tower_grads,
        update.devices,
        update.task.num_workers,
        update.keys,
        update.pack_bytes,
        update.transfer_dtype,
    )


def all_or_none(update, reduced, statistics, later=None):
    """The step's last collectives, then the gate of its update.

    In a cluster of workers only every variable the step writes (each
    copy, its slots, the global step, the loss scale, the statistics, the
    moving averages and the losses' averages) waits for every collective
    of the step: a step that a lost peer cuts short in any (the gradients'
    all-reduces, the statistics' broadcast, the stop collective) changes
    none, so the chief can save the last step it completed
    (`run/failures.py`).

    Args:
      update: the `variable_update.VariableUpdate` of ACROSS_WORKERS.
      reduced: lists of (gradient, variable), `across_workers`'.
      statistics: the last tower's statistics, as the step leaves them on
        this worker (tensors; empty for a model without).
      later: None, or callable() -> the op of the losses' averages
        (`variable_update.update_waits`), made here to run once every
        collective has finished; the update waits for it, as the averages
        read the global step it increments.

    Returns:
      (reduced, statistics): the same lists, and the last worker's
      statistics, every tensor available only once every collective of the
      step (and later's op) has finished (a None gradient stays None).
    """
    task = update.task
    received = collectives.broadcast(
        statistics, task.num_workers - 1, task, update.keys, update.devices[0]
    )
    _, signals = collectives.stop_signals(task)
    present = [g for grads in reduced for g, _ in grads if g is not None]
    last = [signals]
    if later is not None:
        with tf.control_dependencies([tf.group(signals, *present, *received)]):
            last = [later()]
    gated = iter(tf.tuple(present + received, control_inputs=last))
    reduced = [
        [(g if g is None else next(gated), v) for g, v in grads]
        for grads in reduced
    ]
    return reduced, list(gated)


def average_gradients(tower_grads, device=placement.VARIABLE_DEVICE):
    """Averages each variable's gradient over the towers.

    This is the synchronisation point of the towers: no variable is updated
    before every tower has computed its gradients.

    Args:
      tower_grads: list (one per tower) of lists of (gradient, variable),
        all in the same variable order.
      device: str, where to average: the variables' device.

    Returns:
      A list of (gradient, variable), the gradient the mean over the towers;
      a variable that no tower has a gradient for keeps None.
    """
    average_grads = []
    with tf.device(device):
        for grads_and_var in zip(*tower_grads):
            var = grads_and_var[0][1]
            grads = [g for g, _ in grads_and_var if g is not None]
            average_grads.append((_mean(grads), var))
    return average_grads


def _mean(grads):
    """The mean of same-shaped gradients; None for none, one as it is.

    A sum then one division: the tutorial's stack and reduce_mean first
    copied every tower's gradient into one tensor, about 2 ms of CPU a
    step of the tutorial net on 2 towers, 3.5 ms on 4.
    """
    if len(grads) <= 1:
        return grads[0] if grads else None
    return tf.math.add_n(grads) / len(grads)


def made_now(make):
    """One machine: the losses' averages, made before the gradients are
    reduced, which wait for them (`variable_update.update_waits`)."""
    return [make()], None


def made_behind_the_gate(make):
    """ACROSS_WORKERS: the losses' averages, left to `across_workers_gate`."""
    return [], make


def no_gate(update, plan, reduced, statistics, later):
    """One machine: (the gradients as they are, a callable() that reads
    `_last_towers_values` after the update); later is None (`made_now`)."""
    return reduced, functools.partial(
        _last_towers_values, plan, statistics.applied
    )


def across_workers_gate(update, plan, reduced, statistics, later):
    """ACROSS_WORKERS: (the gradients, a callable() -> the statistics'
    names and the last worker's values), read and sent before the update,
    all waiting for every collective of the step, and for the losses'
    averages later makes behind them (`all_or_none`)."""
    with tf.control_dependencies(statistics.updates):
        names, values = _last_towers_values(plan, statistics.applied)
    reduced, received = all_or_none(update, reduced, values, later)
    return reduced, lambda: (names, received)


def _last_towers_values(plan, applied):
    """(names, values): the statistics' variable names, and the values of
    the last tower's copies (after its statistics updates), or the
    variables' own where the step is not applied, each on its device."""
    variables = {var.op.name: var for var in tf.compat.v1.global_variables()}
    names = [name for name in plan[-1].copies if not variables[name].trainable]
    values = []
    for name in names:
        variable = variables[name]
        with tf.device(variable.device):
            values.append(
                tf.where(
                    applied,
                    plan[-1].copies[name].read_value(),
                    variable.read_value(),
                )
            )
    return names, values


def commit_statistics(plan, names, values):
    """The statistics' values (`_last_towers_values`, or in ACROSS_WORKERS
    the last worker's), to the variables and every copy."""
    variables = {var.op.name: var for var in tf.compat.v1.global_variables()}
    assigns = []
    for name, value in zip(names, values):
        variable = variables[name]
        with tf.device(variable.device):
            assigns.append(variable.assign(value))
        for tower in plan:
            copy = tower.copies.get(name)
            if copy is not None:
                with tf.device(copy.device):
                    assigns.append(copy.assign(value))
    return tf.group(*assigns, name="commit_statistics")
