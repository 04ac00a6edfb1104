"""--variable_update=replicated: a copy per tower, all-reduced gradients."""

import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    UNSTARTED_WORKER_FLAGS,
    error_line,
)
from helpers.model_sizes import CIFAR10_PARAMETERS, cifar10_batch_bytes

# The trainers' graph builders (their flags are defined once per process).
import cifar10_multi_gpu_train
import mnist_model
from multigpu.distributed import cluster, sessions
from multigpu.graph import (
    all_reduce,
    dry_run,
    placement,
    step_optimizer,
    towers,
    variable_update,
)
from multigpu.train_dir import checkpoints

PER_TOWER_BATCH = 4


def _mnist_graph(mode, num_towers):
    """The MNIST step (momentum: a slot per variable) on CPU towers."""
    images = np.zeros([2, 784], np.float32)
    labels = np.zeros([2], np.int32)
    devices = placement.tower_devices(num_towers, cpu_towers=True)
    mnist_model.train(
        lambda: (tf.constant(images), tf.constant(labels)),
        devices,
        0.01,
        update=variable_update.variable_update(mode, devices),
    )
    return devices


def _write_mnist_checkpoint(train_dir):
    """A parameter_server checkpoint of step 5, every value drawn at random.

    Returns:
      dict name -> array of what it holds.
    """
    with tf.Graph().as_default():
        _mnist_graph("parameter_server", 1)
        rng = np.random.default_rng(0)
        values = {}
        with tf.compat.v1.Session() as sess:
            for var in tf.compat.v1.global_variables():
                values[var.op.name] = rng.normal(size=var.shape).astype(
                    var.dtype.base_dtype.as_numpy_dtype
                )
                var.load(values[var.op.name], sess)
            tf.compat.v1.train.Saver().save(
                sess, str(train_dir / "model.ckpt"), global_step=5
            )
    return values


def test_a_replicated_run_resumes_every_copy_and_its_slots_from_the_checkpoint(
    tmp_path,
):
    restored = _write_mnist_checkpoint(tmp_path)
    with tf.Graph().as_default():
        devices = _mnist_graph("replicated", 2)
        global_names = {v.op.name for v in tf.compat.v1.global_variables()}
        local_names = {v.op.name for v in tf.compat.v1.local_variables()}
        # What its checkpoints hold: one copy of the weights and slots.
        assert global_names == set(restored)
        assert local_names == {
            towers.replica_name(1, name)
            for name in global_names - {"global_step"}
        }
        # The trainers' own session: restore, then the local init op.
        creator = sessions.session_creator(
            cluster.LOCAL_TASK,
            None,
            tf.compat.v1.train.Scaffold(saver=checkpoints.ExactSaver()),
            placement.session_config(devices),
            str(tmp_path),
        )
        with tf.compat.v1.train.MonitoredSession(creator) as sess:
            for var in tf.compat.v1.local_variables():
                name = towers.primary_name(var.op.name)
                np.testing.assert_array_equal(sess.run(var), restored[name])


@pytest.mark.parametrize(
    "script", ["cifar10_multi_gpu_train.py", "mnist_multi_gpu_train.py"]
)
def test_replicated_is_refused_in_a_cluster_with_ps_with_one_line(
    script, tmp_path
):
    line = error_line(
        script,
        "--variable_update=replicated",
        *UNSTARTED_WORKER_FLAGS,
        "--data_dir=%s" % tmp_path,
    )
    assert line == (
        "%s: error: --variable_update=replicated runs in a cluster of "
        "workers only, but --ps_hosts lists 1 ps task(s); drop --ps_hosts "
        "(and the ps tasks) or pass --variable_update=parameter_server" % script
    )


def test_nccl_on_cpu_towers_is_refused_naming_the_device():
    with pytest.raises(ValueError) as error:
        all_reduce.algorithm("nccl", ["/cpu:0", "/cpu:1"])
    assert str(error.value) == (
        "--all_reduce_spec=nccl needs GPU towers, got /cpu:0; use collective"
    )
    assert all_reduce.algorithm("auto", ["/gpu:0"]) == "nccl"
    assert all_reduce.algorithm("auto", ["/cpu:0"]) == "collective"


def _replicated_dry_run(num_gpus, spec, capsys):
    devices = dry_run.gpu_devices(num_gpus)
    update = variable_update.variable_update(
        "replicated", devices, all_reduce_spec=spec
    )
    batch_shapes = [
        ([PER_TOWER_BATCH, 24, 24, 3], tf.float32),
        ([PER_TOWER_BATCH], tf.int32),
    ]
    with tf.Graph().as_default() as graph:
        cifar10_multi_gpu_train.build_graph(
            inputs=cifar10_multi_gpu_train.TowerInput(
                dry_run.synthetic_batches(batch_shapes), PER_TOWER_BATCH
            ),
            update=update,
            dtypes=step_optimizer.Dtypes(tf.float32, None),
        )
        capsys.readouterr()
        dry_run.check(graph, batch_shapes, "plan", update)
    return graph, capsys.readouterr().out


@pytest.mark.parametrize(
    "num_gpus, spec, reduce_op",
    [(2, "auto", "NcclAllReduce"), (8, "collective", "CollectiveReduceV2")],
)
def test_the_dry_run_counts_a_copy_per_gpu_and_the_ring_bytes(
    num_gpus, spec, reduce_op, capsys
):
    graph, plan = _replicated_dry_run(num_gpus, spec, capsys)

    parameters = CIFAR10_PARAMETERS
    for i in range(num_gpus):
        assert re.search(
            r"/device:GPU:%d +\d+ ops +%s parameters" % (i, f"{parameters:,}"),
            plan,
        ), plan
    # A ring: every GPU sends and receives 2 (N - 1) / N of the gradients.
    ring = 2 * (num_gpus - 1) * parameters * 4 // num_gpus
    batch = cifar10_batch_bytes(PER_TOWER_BATCH)
    towers = re.findall(
        r"tower (\d) on /gpu:\d: host link in ([\d,]+) bytes \(input batch\);"
        r" GPU-to-GPU out ([\d,]+) \+ in ([\d,]+) bytes",
        plan,
    )
    assert [
        tuple(int(n.replace(",", "")) for n in each) for each in towers
    ] == [(i, batch, ring, ring) for i in range(num_gpus)]
    # The all-reduce ops are on the GPUs, and have GPU kernels.
    reduces = [op for op in graph.get_operations() if op.type == reduce_op]
    assert len(reduces) == num_gpus * 10
    assert "GPU ops without a GPU kernel in this TensorFlow build: none" in plan
