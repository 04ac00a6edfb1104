"""One training step of the CIFAR-10 trainer's graph on a fixed batch."""

import numpy as np
import tensorflow as tf

# cifar10_multi_gpu_train is the one script the tests import (for its
# build_graph): two scripts' absl flags clash in one process.
import cifar10_multi_gpu_train
from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import placement, step_optimizer, variable_update
from multigpu.train_dir import checkpoints
from verification import sessions


def cifar10_step_graph(
    images,
    labels,
    num_towers=1,
    task=cluster.LOCAL_TASK,
    devices=None,
    variable_device=placement.VARIABLE_DEVICE,
    xla=False,
    compute_dtype=tf.float32,
    model=registry.TUTORIAL,
):
    """Builds one training step of cifar10_multi_gpu_train.py on a batch.

    The trainer's own `build_graph`, fed a fixed batch split evenly: tower
    i (on virtual CPU device /cpu:i unless `devices` says otherwise) gets
    the i-th slice. Call it inside the task's device function
    (`cluster.device_setter`).

    Args:
      images: float32 [n, 24, 24, 3], n divisible by num_towers.
      labels: int32 [n].
      num_towers: int, the towers of this graph.
      task: a `cluster.ClusterTask`; a sync worker's optimizer is wrapped by
        `cluster.sync_optimizer`.
      devices: the towers' devices instead of /cpu:0 ... /cpu:N-1.
      variable_device, xla, compute_dtype, model: as the trainer passes
        them.

    Returns:
      loss: float32 scalar, the mean of the towers' total losses.
      train_op: the op of one step.
      hooks: the session hooks of `cluster.sync_hooks` ([] unless sync).
    """
    devices = devices or ["/cpu:%d" % i for i in range(num_towers)]
    batches = iter(
        zip(np.split(images, num_towers), np.split(labels, num_towers))
    )

    def get_next():
        tower_images, tower_labels = next(batches)
        return tf.constant(tower_images), tf.constant(tower_labels)

    loss, train_op, _, hooks = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            get_next, len(images) // num_towers
        ),
        update=variable_update.parameter_server(devices, variable_device),
        dtypes=step_optimizer.Dtypes(compute_dtype, None),
        model=model,
        task=task,
        options=cifar10_multi_gpu_train.StepOptions(xla=xla),
    )
    return loss, train_op, hooks


def zeros_step_graph(
    devices, update, task=cluster.LOCAL_TASK, prefetch=False, **options
):
    """Builds cifar10_multi_gpu_train.py's step on batches of 2 zero
    images per tower, in the default graph.

    Args:
      devices: the towers' device strings.
      update: the `variable_update.VariableUpdate`.
      task: a `cluster.ClusterTask`.
      prefetch: bool, `build_graph`'s `TowerInput.prefetch`.
      **options: model of `build_graph`.

    Returns:
      The train op.
    """
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            lambda: (tf.zeros([2, 24, 24, 3]), tf.zeros([2], tf.int32)),
            2,
            prefetch,
        ),
        update=update,
        dtypes=step_optimizer.Dtypes(tf.float32, None),
        task=task,
        **options,
    )
    return train_op


def cifar10_step(num_towers, images, labels, initial_values, **options):
    """Runs one training step of the CIFAR-10 model on num_towers towers.

    Args:
      num_towers: int, towers on virtual CPU devices /cpu:0 ... /cpu:N-1.
      images: float32 [n, 24, 24, 3], n divisible by num_towers.
      labels: int32 [n].
      initial_values: dict variable name (in the checkpoints) -> array, or
        None to draw them.
      **options: devices, variable_device, xla, compute_dtype, model of
        `cifar10_step_graph`.

    Returns:
      loss: float, the mean of the towers' total losses before the step.
      values: dict variable name (in the checkpoints) -> array after the
        step.
      ran: list of (device, op name, op type) the step ran, e.g.
        ('CPU:1', 'cluster_3_1/xla_run', '_XlaRun').
    """
    devices = options.get("devices") or [
        "/cpu:%d" % i for i in range(num_towers)
    ]
    with tf.Graph().as_default():
        loss, train_op, _ = cifar10_step_graph(
            images, labels, num_towers, **options
        )
        variables = tf.compat.v1.trainable_variables()
        # One CPU device per tower, and /cpu:0 for the variables.
        config = placement.session_config(["/cpu:0"] + list(devices))
        with tf.compat.v1.Session(config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            if initial_values is not None:
                for var in variables:
                    var.load(initial_values[checkpoints.saved_name(var)], sess)
            sess.run(sessions.local_init_op())
            metadata = tf.compat.v1.RunMetadata()
            loss_value, _ = sess.run(
                [loss, train_op],
                options=tf.compat.v1.RunOptions(
                    trace_level=tf.compat.v1.RunOptions.FULL_TRACE
                ),
                run_metadata=metadata,
            )
            ran = [
                (device.device[-5:], node.node_name, _op_type(node))
                for device in metadata.step_stats.dev_stats
                for node in device.node_stats
            ]
            values = {checkpoints.saved_name(v): sess.run(v) for v in variables}
            return loss_value, values, ran


def _op_type(node_stats):
    # The timeline label reads 'NAME = TYPE(INPUTS)'.
    return node_stats.timeline_label.partition(" = ")[2].partition("(")[0]
