"""The `reduce`, `waits` and `gate` columns of `variable_update`'s table.

The last tower's statistics (as the Inception trainer runs the last
tower's updates only) are committed to the variable and every copy,
unless the loss scale skips the step.
"""

import functools

import tensorflow as tf

from multigpu.graph import all_reduce, collectives, placement


def on_variable_device(update, tower_grads):
    """parameter_server: [the towers' mean on the variable device]."""
    return [average_gradients(tower_grads, update.variable_device)]


def between_towers(update, tower_grads):
    """replicated: a list (one per tower) of lists of (the mean on its
    device, its own copy)."""
    return all_reduce.all_reduce_mean(
        tower_grads, update.devices, update.all_reduce, update.keys
    )


def across_workers(update, tower_grads):
    """replicated across the workers."""
    return collectives.all_reduce_mean(
        tower_grads,
        update.devices,
        update.task.num_workers,
        update.keys,
        update.pack_bytes,
        update.transfer_dtype,
    )


def all_or_none(update, reduced, statistics, later=None):
    """The step's last collectives, then the gate of its update:
    (reduced, the last worker's statistics), available only once every
    collective (and later's op, the losses' averages) has finished, so a step
    a lost peer cuts short changes no variable and the chief can save the last
    step it completed (`run/failures.py`).
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
    """The towers' mean of each variable's gradient, on device; None
    where no tower has a gradient."""
    average_grads = []
    with tf.device(device):
        for grads_and_var in zip(*tower_grads):
            var = grads_and_var[0][1]
            grads = [g for g, _ in grads_and_var if g is not None]
            average_grads.append((_mean(grads), var))
    return average_grads


def _mean(grads):
    """A sum then one division: the tutorial's stack and reduce_mean
    copies every tower's gradient into one tensor, about 2 ms of CPU a step of
    the tutorial net on 2 towers, 3.5 ms on 4."""
    if len(grads) <= 1:
        return grads[0] if grads else None
    return tf.math.add_n(grads) / len(grads)


def made_now(make):
    """One machine: the losses' averages, made before the gradients are
    reduced, which wait for them."""
    return [make()], None


def made_behind_the_gate(make):
    return [], make


def no_gate(update, plan, reduced, statistics, later):
    return reduced, functools.partial(
        _last_towers_values, plan, statistics.applied
    )


def across_workers_gate(update, plan, reduced, statistics, later):
    """ACROSS_WORKERS: the statistics read and sent before the update."""
    with tf.control_dependencies(statistics.updates):
        names, values = _last_towers_values(plan, statistics.applied)
    reduced, received = all_or_none(update, reduced, values, later)
    return reduced, lambda: (names, received)


def _last_towers_values(plan, applied):
    """(names, values): the statistics' names and the last tower's
    values, or the variables' own where the step is not applied."""
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
