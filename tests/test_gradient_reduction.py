"""The gradients' reduction: the mean of every tower's gradients."""

import collections

import tensorflow as tf
from helpers.towers import zeros_step_graph

from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import gradient_reduction, variable_update

# The bytes of one all-reduce across the workers: small, so that the
# tutorial's gradients make several packs.
PACK_BYTES = 64 * 1024


def test_average_gradients_is_the_mean_and_keeps_variables_without_one():
    with tf.Graph().as_default():
        a = tf.Variable(1.0)
        b = tf.Variable(2.0)
        tower_grads = [
            [(tf.constant(1.0), a), (None, b)],
            [(tf.constant(3.0), a), (None, b)],
        ]
        averaged = gradient_reduction.average_gradients(tower_grads)
        assert averaged[1] == (None, b)
        assert averaged[0][1] is a
        with tf.compat.v1.Session() as sess:
            assert sess.run(averaged[0][0]) == 2.0


def _reductions(mode, task):
    """The reduction ops of two towers' gradients of one float32 [3]
    variable in the mode's row: (op type, device, group size) each."""
    devices = ["/cpu:0", "/cpu:1"]
    workers = None if task is None else variable_update.Workers(task)
    update = variable_update.variable_update(mode, devices, workers=workers)
    with tf.Graph().as_default() as graph:
        var = tf.Variable(tf.zeros([3]))
        tower_grads = [[(tf.ones([3]), var)] for _ in devices]
        reduced = variable_update.reduce_gradients(update, tower_grads)
    ops = [
        op
        for op in graph.get_operations()
        if op.type in ("AddN", "CollectiveReduceV2")
    ]
    # CollectiveReduceV2's second input is its group size.
    return (
        update.mode,
        len(reduced),
        [
            (op.type, op.device, int(tf.get_static_value(op.inputs[1])))
            if op.type == "CollectiveReduceV2"
            else (op.type, op.device, None)
            for op in ops
        ],
    )


def test_each_row_of_the_variable_update_table_has_its_own_reduction():
    workers = cluster.cluster_task(
        "", "127.0.0.1:2222,127.0.0.1:2223", "worker", 1
    )

    assert _reductions("parameter_server", None) == (
        "parameter_server",
        1,
        [("AddN", "/device:CPU:0", None)],
    )
    assert _reductions("replicated", None) == (
        "replicated",
        2,
        [
            ("CollectiveReduceV2", "/device:CPU:0", 2),
            ("CollectiveReduceV2", "/device:CPU:1", 2),
        ],
    )
    # One ring of the 4 towers of the 2 workers.
    assert _reductions("replicated", workers) == (
        "replicated_across_workers",
        2,
        [
            ("CollectiveReduceV2", "/device:CPU:0", 4),
            ("CollectiveReduceV2", "/device:CPU:1", 4),
        ],
    )


def _ancestors(op):
    """The ops op waits for: its inputs' and control inputs', transitively."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for each in [t.op for t in current.inputs] + current.control_inputs:
            if each not in seen:
                seen.add(each)
                stack.append(each)
    return seen


# The ops that write a resource variable, but the optimizers' applies.
_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def _collectives_above(graph):
    """{op: the collective ops it waits for, transitively}, in one pass
    over graph's ops in the order they were made (inputs first)."""
    above = {}
    for op in graph.get_operations():
        found = set()
        for each in [t.op for t in op.inputs] + op.control_inputs:
            found |= above[each]
            if each.type.startswith("Collective"):
                found.add(each)
        above[op] = found
    return above


def _variables_written(op):
    """The names of the variables a write op (an assign, an optimizer's
    apply) writes: those of the resource handles it takes."""
    names = set()
    for each in op.inputs:
        if each.dtype == tf.resource:
            handle = each.op
            while handle.type != "VarHandleOp":
                handle = handle.inputs[0].op
            names.add(handle.name)
    return names


def _resnet_step_across_workers():
    """ResNet-20's step on one tower of worker 0 of two, in a cluster of
    workers only: (its graph, its train op, the saved variables' names,
    the ops of the step that write a variable)."""
    devices = ["/cpu:0"]
    task = cluster.cluster_task(
        None, "127.0.0.1:2222,127.0.0.1:2223", "worker", 0
    )
    update = variable_update.variable_update(
        "replicated",
        devices,
        workers=variable_update.Workers(task, PACK_BYTES),
    )
    with tf.Graph().as_default() as graph:
        train_op = zeros_step_graph(
            devices,
            update,
            task,
            model=registry.MODELS["resnet20"],
        )
        saved = {v.op.name for v in tf.compat.v1.global_variables()}
    writes = [
        op
        for op in _ancestors(train_op)
        if op.type in _WRITES or op.type.startswith("ResourceApply")
    ]
    return graph, train_op, saved, writes


def test_every_saved_variable_waits_for_every_collective_across_workers():
    """The all-or-none gate: a step a lost peer cuts short in any of its
    collectives writes no variable the chief saves (weights, their slots,
    batch-norm statistics, moving averages, the losses' averages, global
    step)."""
    graph, train_op, saved, writes = _resnet_step_across_workers()
    collectives = {
        op for op in _ancestors(train_op) if op.type.startswith("Collective")
    }
    above = _collectives_above(graph)
    early = set().union(
        *(_variables_written(op) for op in writes if above[op] != collectives)
    )
    # ResNet-20's gradients in 17 pieces of at most PACK_BYTES; the
    # workers' signals; the last worker's statistics.
    assert collections.Counter(op.type for op in collectives) == {
        "CollectiveReduceV2": 18,
        "CollectiveBcastRecvV2": 1,
    }
    assert "update/stop_signals/CollectiveReduceV2" in {
        op.name for op in collectives
    }
    # ResNet-20's 59 weights, their momentum and moving averages; its 38
    # statistics and their moving averages; the global step; the 2
    # losses' averages.
    assert len(saved) == 59 * 3 + 38 * 2 + 1 + 2
    assert set().union(*map(_variables_written, writes)) >= saved
    # Before some collective: only the last tower's own copies of its 38
    # statistics (local variables, never saved).
    assert sorted(early & saved) == []
    assert len(early) == 38


def test_the_global_step_increments_after_the_losses_averages_across_workers():
    """The losses' averages, which read the global step (their updates'
    count), move before the update increments it, as on one machine."""
    _, _, _, writes = _resnet_step_across_workers()
    (increment,) = [
        op for op in writes if _variables_written(op) == {"global_step"}
    ]
    before = set().union(
        *(
            _variables_written(op)
            for op in _ancestors(increment)
            if op in writes
        )
    )
    assert sorted(name for name in before if name.startswith("summaries/")) == [
        "summaries/cross_entropy/avg",
        "summaries/total_loss/avg",
    ]
