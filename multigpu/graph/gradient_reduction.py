"""The gradients' reduction: every tower's gradients, reduced for the update.

The synchronisation point of a step, one function per mode, which the
`reduce` column of `variable_update`'s table names (tf_cnn_benchmarks'
variable manager owns its mode's reduction the same way):
parameter_server averages them on the variable device (`on_variable_device`,
`average_gradients`), replicated all-reduces them between the towers
(`between_towers`, `all_reduce`), and across the workers of a cluster of
workers only (`across_workers`, `collectives`), whose update waits for
every collective of its step (`all_or_none`).
"""

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
