"""A cluster of workers only starts every worker from the chief's values.

The other workers take every variable the chief restored or initialised,
not only the trainable ones: the batch-norm statistics, the optimizer's
slots and the global step too. Checked on the graph of worker 1 of 2 (no
server is started): the variables its start assigns from what the chief
sends.
"""

import tensorflow as tf
from conftest import SHADOW

import cifar10_multi_gpu_train
from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import step_optimizer, variable_update
from verification import sessions

# ResNet-20's batch norms: one before the stages, two in each of 9 blocks.
RESNET20_BATCH_NORMS = 1 + 2 * 9


def _grouped(op):
    """The ops a `tf.group` op waits for, through its NoOps."""
    if op.type != "NoOp":
        return [op]
    return [found for waited in op.control_inputs for found in _grouped(waited)]


def _worker_start(task_index):
    """Builds a worker's ResNet-20 training graph of one CPU tower.

    Returns:
      (the names of the variables its start assigns the chief's values to,
      the names of the graph's global variables, of its trainable ones).
    """
    # No server is started: the graph is all the test takes of the task.
    task = cluster.cluster_task(
        "", "127.0.0.1:1,127.0.0.1:2", "worker", task_index
    )
    devices = ["/cpu:0"]
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        cifar10_multi_gpu_train.build_graph(
            inputs=cifar10_multi_gpu_train.TowerInput(
                lambda: (
                    tf.zeros([2, 24, 24, 3]),
                    tf.zeros([2], tf.int32),
                ),
                2,
            ),
            update=variable_update.variable_update(
                "replicated", devices, workers=variable_update.Workers(task)
            ),
            dtypes=step_optimizer.Dtypes(tf.float32, None),
            model=registry.model("resnet20"),
            task=task,
        )
        sessions.local_init_op()
        take = graph.get_operation_by_name("update/take_chief_values")
        assigned = {op.inputs[0].op.name for op in _grouped(take)}
        names = {v.op.name for v in tf.compat.v1.global_variables()}
        trainable = {v.op.name for v in tf.compat.v1.trainable_variables()}
    return assigned, names, trainable


def test_the_other_worker_takes_every_variable_of_the_chief_at_its_start():
    assigned, names, trainable = _worker_start(1)

    # The moving averages are made after the update, each worker's from its
    # own start (only the chief's are saved).
    shadows = {name for name in names if name.endswith(SHADOW)}
    assert names - shadows - assigned == set()
    statistics = {
        name
        for name in assigned
        if name.startswith("model/")
        and name.endswith(("/moving_mean", "/moving_variance"))
    }
    assert len(statistics) == 2 * RESNET20_BATCH_NORMS
    assert {name + "/Momentum" for name in trainable} <= assigned
    assert "global_step" in assigned
