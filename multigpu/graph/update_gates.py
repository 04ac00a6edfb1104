"""What a step's update waits for, per --variable_update mode (the `waits`
and `gate` columns of `variable_update`'s table), and the statistics every
copy takes after it.

Statistics (the non-trainable variables, such as batch-norm moving means):
in both modes the last tower updates its own copy from its batch (the
Inception trainer runs the last tower's updates only), and the step then
commits that value to the variable and every copy, unless the step is not
applied (`loss_scale.step_applied`): a step skipped by loss scaling leaves
every statistic as it was.
"""

import functools

import tensorflow as tf

from multigpu.graph import gradient_reduction


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
    _, applied = statistics
    return reduced, functools.partial(_last_towers_values, plan, applied)


def across_workers_gate(update, plan, reduced, statistics, later):
    """ACROSS_WORKERS: (the gradients, a callable() -> the statistics'
    names and the last worker's values), read and sent before the update,
    all waiting for every collective of the step, and for the losses'
    averages later makes behind them (`gradient_reduction.all_or_none`)."""
    updates, applied = statistics
    with tf.control_dependencies(updates):
        names, values = _last_towers_values(plan, applied)
    reduced, received = gradient_reduction.all_or_none(
        update, reduced, values, later
    )
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
