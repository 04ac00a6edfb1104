"""The digests of the model's code that the workers compare before step 1.

Each worker builds its own graph: the agreement compares the digest of its
model's variables (names, shapes, dtypes) and of its first tower's ops
(types, shapes, number constants; no names, no devices), so a model module
that differs between machines ends every worker. Built here in-process as
the multi-GPU trainer builds them.
"""

import tensorflow as tf
from helpers.towers import zeros_step_graph

from cifar10_models import registry
from multigpu.distributed import agreement, cluster
from multigpu.graph import variable_update

DEVICES = ["/cpu:0", "/cpu:1"]


def _model(activation, width=8):
    """conv (width filters) - activation - mean - dense: [batch, 10]."""

    def net(images, is_training):
        del is_training
        x = tf.compat.v1.layers.conv2d(images, width, 3, name="conv")
        x = tf.reduce_mean(activation(x), [1, 2])  # [batch, width]
        return tf.compat.v1.layers.dense(x, 10, name="dense")

    return registry.TUTORIAL._replace(name="mine:net", build=net)


RELU = _model(tf.nn.relu)


def _tanh_times_3(x):
    return tf.tanh(x) * 3


def _digests(model, prefetch=False, task_index=None):
    """(variables digest, ops digest) of a 2-tower trainer's graph: local,
    or worker task_index's of a cluster of 2 workers only."""
    task = cluster.LOCAL_TASK
    if task_index is not None:
        task = cluster.cluster_task(
            None, "127.0.0.1:1,127.0.0.1:2", "worker", task_index
        )
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        zeros_step_graph(
            DEVICES,
            variable_update.variable_update(
                "replicated",
                DEVICES,
                workers=None
                if task_index is None
                else variable_update.Workers(task),
            ),
            task,
            prefetch=prefetch,
            model=model,
        )
        return (
            agreement.variables_digest(tf.compat.v1.global_variables()),
            agreement.ops_digest(graph),
        )


def test_two_workers_of_one_model_have_one_digest_whatever_their_own_flags():
    # Worker 0 and worker 1, one staging its batches (--prefetch_to_device,
    # a worker's own flag), the other not.
    assert _digests(RELU, prefetch=True, task_index=0) == _digests(
        RELU, prefetch=False, task_index=1
    )


def test_a_model_of_the_same_variables_but_other_ops_has_another_ops_digest():
    relu_variables, relu_ops = _digests(RELU)
    tanh_variables, tanh_ops = _digests(_model(_tanh_times_3))
    assert relu_variables == tanh_variables
    assert relu_ops != tanh_ops


def test_a_model_whose_variables_change_shape_has_other_digests():
    relu_variables, relu_ops = _digests(RELU)
    wider_variables, wider_ops = _digests(_model(tf.nn.relu, width=16))
    # The same names and dtypes: only the shapes tell them apart.
    assert relu_variables.split(",")[0] == "11 variables"
    assert wider_variables.split(",")[0] == "11 variables"
    assert relu_variables != wider_variables
    assert relu_ops != wider_ops
