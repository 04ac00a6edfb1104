"""The gradients' reduction: the mean of every tower's gradients."""

import tensorflow as tf
from helpers.towers import zeros_step_graph

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
    update = variable_update.variable_update(mode, devices, task=task)
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


def test_every_copys_update_waits_for_every_packs_all_reduce_across_workers():
    """The all-or-none gate: a step a lost peer cuts short changes no copy."""
    devices = ["/cpu:0", "/cpu:1"]
    task = cluster.cluster_task(
        None, "127.0.0.1:2222,127.0.0.1:2223", "worker", 0
    )
    update = variable_update.variable_update(
        "replicated", devices, task=task, pack_bytes=PACK_BYTES
    )
    with tf.Graph().as_default() as graph:
        zeros_step_graph(devices, update, task)
    ops = graph.get_operations()
    all_reduces = {op for op in ops if op.type == "CollectiveReduceV2"}
    updates = [op for op in ops if op.type.startswith("ResourceApply")]
    # The tutorial's 10 variables on 2 copies; its gradients in 66 pieces
    # of at most PACK_BYTES, each all-reduced on both towers.
    assert len(updates) == 20
    assert len(all_reduces) == 132
    for op in updates:
        assert all_reduces <= _ancestors(op), op.name
