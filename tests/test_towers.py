"""The tower machinery: equivalence with one big batch, placement, devices."""

import collections

import numpy as np
import pytest
import tensorflow as tf
from helpers.towers import cifar10_step, cifar10_step_graph

import cifar10
from multigpu.distributed import cluster
from multigpu.graph import placement, summaries, towers

PER_TOWER_BATCH = 8


def _initial_values():
    images = np.zeros([1, 24, 24, 3], np.float32)
    with tf.Graph().as_default():
        cifar10.inference(images)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return {
                v.op.name: sess.run(v)
                for v in tf.compat.v1.trainable_variables()
            }


def _two_tower_graph(
    devices=("/cpu:0", "/cpu:1"),
    variable_device=placement.VARIABLE_DEVICE,
    compute_dtype=tf.float32,
):
    graph = tf.Graph()
    with graph.as_default():
        cifar10_step_graph(
            np.zeros([4, 24, 24, 3], np.float32),
            np.zeros([4], np.int32),
            num_towers=2,
            devices=list(devices),
            variable_device=variable_device,
            compute_dtype=compute_dtype,
        )
    return graph


def test_variables_exist_once_and_live_on_the_cpu():
    graph = _two_tower_graph()
    variables = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = sorted(v.op.name for v in variables)
    assert names == sorted(
        "model/%s/%s" % (layer, kind)
        for layer in ["conv1", "conv2", "local3", "local4", "softmax_linear"]
        for kind in ["weights", "biases"]
    )
    assert {v.device for v in variables} == {"/device:CPU:0"}


def test_each_tower_computes_on_its_own_device_under_its_own_scope():
    graph = _two_tower_graph()
    compute_types = {
        "Conv2D",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "MatMul",
        "MaxPool",
        "MaxPoolGrad",
        "Einsum",
        "LRN",
        "LRNGrad",
    }
    compute_ops = [
        op for op in graph.get_operations() if op.type in compute_types
    ]
    for i in range(2):
        ops = [
            op
            for op in compute_ops
            if op.name.startswith("towers/tower_%d/" % i)
        ]
        forward = [op.type for op in ops if "gradients" not in op.name]
        # conv1, conv2; local3, local4, softmax_linear; pool1, pool2; the
        # norms' sums over channels (`cifar10._lrn`: no LRN kernel).
        assert sorted(forward) == sorted(
            ["Conv2D"] * 2 + ["MatMul"] * 3 + ["MaxPool"] * 2 + ["Einsum"] * 2
        )
        # Backward: two ops per convolution and per matmul (input and
        # weights), one per pool and per norm (its window's sum).
        assert len(ops) - len(forward) == 2 * 2 + 3 * 2 + 2 + 2
        assert {op.device for op in ops} == {"/device:CPU:%d" % i}
    assert all(op.name.startswith("towers/tower_") for op in compute_ops)


def test_asking_for_more_gpus_than_visible_names_both_numbers():
    with pytest.raises(ValueError) as error:
        placement.tower_devices(3, cpu_towers=False)
    assert str(error.value) == (
        "--num_gpus=3 but 0 GPU(s) are visible; pass --cpu_towers to run "
        "the towers on virtual CPU devices"
    )


def test_cpu_towers_get_one_virtual_cpu_device_each():
    devices = placement.tower_devices(3, cpu_towers=True)
    assert devices == ["/cpu:0", "/cpu:1", "/cpu:2"]
    config = placement.session_config(devices)
    assert config.device_count["CPU"] == 3
    assert config.allow_soft_placement
    with tf.Graph().as_default():
        with tf.compat.v1.Session(config=config) as sess:
            cpus = [d.name for d in sess.list_devices() if "CPU" in d.name]
    assert len(cpus) == 3


def test_summary_tags_leave_out_the_tower_scope():
    graph = tf.Graph()
    with graph.as_default(), tf.name_scope("tower_3"):
        with tf.name_scope("conv1"):
            summary = summaries.scalar_summary("sparsity", tf.constant(0.5))
        with tf.compat.v1.Session() as sess:
            value = tf.compat.v1.Summary.FromString(sess.run(summary)).value
    assert summary.op.name == "tower_3/conv1/sparsity"
    assert [(v.tag, v.simple_value) for v in value] == [("conv1/sparsity", 0.5)]


def test_clipping_bounds_the_global_norm_of_the_averaged_gradients():
    with tf.Graph().as_default():
        a, b = tf.Variable(0.0), tf.Variable(0.0)
        clipped = towers.clip_gradients(
            [(tf.constant(3.0), a), (tf.constant(4.0), b)], 1.0
        )
        with tf.compat.v1.Session() as sess:
            values = sess.run([g for g, _ in clipped])
    np.testing.assert_allclose(values, [0.6, 0.8], rtol=1e-6)


def _random_batch(seed, size):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=[size, 24, 24, 3]).astype(np.float32)
    labels = rng.integers(0, 10, size=[size]).astype(np.int32)
    return images, labels


def test_fp16_keeps_every_variable_float32_while_the_towers_compute_bfloat16():
    devices = placement.tower_devices(2, cpu_towers=True)
    compute_dtype = placement.compute_dtype(True, devices, cpu_bfloat16=True)
    graph = _two_tower_graph(devices, compute_dtype=compute_dtype)
    variables = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    assert compute_dtype == tf.bfloat16
    assert len(variables) == 10
    assert {v.dtype.base_dtype for v in variables} == {tf.float32}
    forward = [
        op
        for op in graph.get_operations()
        if op.type in ("Conv2D", "MatMul") and "gradients" not in op.name
    ]
    # conv1, conv2, local3, local4, softmax_linear in each of the 2 towers.
    assert len(forward) == 10
    assert {op.get_attr("T") for op in forward} == {tf.bfloat16}
    # The averaged gradients reach the float32 variables as float32.
    updates = [
        op
        for op in graph.get_operations()
        if op.type == "ResourceApplyGradientDescent"
    ]
    assert len(updates) == 10
    assert {op.inputs[2].dtype for op in updates} == {tf.float32}


# XLA compiles about 45 clusters per run: some 8 s on 2 shared cores.
@pytest.mark.slow
def test_xla_takes_the_same_first_step_as_tensorflow_within_1e_4():
    images, labels = _random_batch(0, 2 * PER_TOWER_BATCH)
    initial = _initial_values()
    loss, values, _ = cifar10_step(2, images, labels, initial)
    xla_loss, xla_values, ran = cifar10_step(
        2, images, labels, initial, xla=True
    )
    assert xla_loss == pytest.approx(loss, rel=1e-6)
    for name, value in values.items():
        update = value - initial[name]
        xla_update = xla_values[name] - initial[name]
        # Each update agrees to 1e-4 of the variable's largest update.
        np.testing.assert_allclose(
            xla_update,
            update,
            rtol=0,
            atol=1e-4 * np.abs(update).max(),
            err_msg=name,
        )
    # XLA really ran the towers: compiled clusters on both tower devices.
    # Outside them ran only constants, variable handles and the fused kernels
    # that the CPU's graph passes make before XLA clusters the graph (no XLA
    # kernel): the forward convolutions with their bias and ReLU
    # (_FusedConv2D, or oneDNN's _MklNativeFusedConv2D on CPUs with
    # AVX-512), and on such CPUs the fully connected layers too
    # (_MklNativeFusedMatMul).
    xla_devices = {device for device, _, kind in ran if kind == "_XlaRun"}
    assert xla_devices == {"CPU:0", "CPU:1"}
    outside = collections.Counter(
        kind
        for _, op, kind in ran
        if op.startswith("towers/tower_")
        and kind not in ("Const", "VarHandleOp")
    )
    convolutions = sum(
        n for kind, n in outside.items() if kind.endswith("FusedConv2D")
    )
    assert convolutions == 4, outside
    assert all(
        kind.endswith(("FusedConv2D", "FusedMatMul")) for kind in outside
    ), outside


@pytest.mark.parametrize("choice", ["tower", "gpu"])
def test_variables_on_the_first_tower_take_the_same_step_as_on_the_cpu(choice):
    # Towers on /cpu:1 and /cpu:2, so that the first tower's device is not
    # the CPU device /cpu:0 the variables live on by default.
    devices = ["/cpu:1", "/cpu:2"]
    variable_device = placement.variable_device(choice, devices)
    assert variable_device == "/cpu:1"
    images, labels = _random_batch(1, 2 * PER_TOWER_BATCH)
    initial = _initial_values()
    cpu_loss, cpu_values, _ = cifar10_step(
        2, images, labels, initial, devices=devices
    )
    loss, values, ran = cifar10_step(
        2,
        images,
        labels,
        initial,
        devices=devices,
        variable_device=variable_device,
    )
    assert loss == pytest.approx(cpu_loss, rel=1e-6)
    for name, value in cpu_values.items():
        np.testing.assert_allclose(
            values[name], value, rtol=1e-6, atol=0, err_msg=name
        )
    # The variables were updated on the first tower's device.
    applied = {device for device, _, kind in ran if "ApplyGradient" in kind}
    assert applied == {"CPU:1"}


def test_variables_and_their_gradient_mean_live_on_the_variable_device():
    graph = _two_tower_graph(["/cpu:1", "/cpu:2"], variable_device="/cpu:1")
    variables = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    assert len(variables) == 10
    assert {v.device for v in variables} == {"/device:CPU:1"}
    # One sum and one division per variable's gradient, in the reduce block.
    means = [
        op
        for op in graph.get_operations()
        if op.type in ("AddN", "RealDiv") and op.name.startswith("reduce/")
    ]
    assert sorted(op.type for op in means) == ["AddN"] * 10 + ["RealDiv"] * 10
    assert {op.device for op in means} == {"/device:CPU:1"}


def test_variables_on_a_tower_are_an_error_in_cluster_mode():
    task = cluster.cluster_task("localhost:2222", "localhost:2223", "worker", 0)
    places = task.kind.places_variables
    assert placement.variable_device("cpu", ["/cpu:0"], places) == "/cpu:0"
    with pytest.raises(ValueError) as error:
        placement.variable_device("tower", ["/cpu:0"], places)
    assert str(error.value) == (
        "--variable_device=tower does not apply in cluster mode: the "
        "variables live on the ps tasks"
    )


def _batches_per_step(prefetch, steps_per_session):
    """The batch numbers each step's two towers took, session by session.

    The input is the batches 0, 1, 2, ... of one shared iterator, as in the
    trainer; each tower takes one per step, staged or not.
    """
    with tf.Graph().as_default():
        dataset = tf.data.Dataset.range(1000)
        iterator = tf.compat.v1.data.make_one_shot_iterator(dataset)
        taken, put_ops = [], []
        for i in range(2):
            with tf.device("/cpu:%d" % i), tf.name_scope("tower_%d" % i):
                with tf.device("/cpu:0"):
                    batch = iterator.get_next()
                if prefetch:
                    (batch,), put_op = towers.stage_on_device([batch])
                    put_ops.append(put_op)
                taken.append(tf.identity(batch))
        train_op = tf.group(*taken, *put_ops)
        hooks = [towers.WarmUpHook(put_ops)] if prefetch else []
        sessions = []
        for steps in steps_per_session:
            with tf.compat.v1.train.MonitoredSession(
                session_creator=tf.compat.v1.train.ChiefSessionCreator(
                    config=placement.session_config(["/cpu:0", "/cpu:1"])
                ),
                hooks=hooks,
            ) as sess:
                sessions.append(
                    [
                        sorted(sess.run([taken, train_op])[0])
                        for _ in range(steps)
                    ]
                )
        return sessions


def test_staged_batches_are_the_unstaged_ones_in_order_in_each_new_session():
    unstaged = _batches_per_step(False, [3, 2])
    staged = _batches_per_step(True, [3, 2])
    # A new session (a resumed run) reads the input from its start again.
    assert unstaged == [[[0, 1], [2, 3], [4, 5]], [[0, 1], [2, 3]]]
    assert staged == unstaged


def test_a_staged_tensor_keeps_the_dtype_and_shape_on_the_device():
    with tf.Graph().as_default():
        images = tf.zeros([4, 24, 24, 3])
        labels = tf.zeros([4], tf.int32)
        with tf.device("/cpu:1"), tf.name_scope("tower_1"):
            staged, put_op = towers.stage_on_device([images, labels])
    assert [(t.dtype, t.shape.as_list()) for t in staged] == [
        (tf.float32, [4, 24, 24, 3]),
        (tf.int32, [4]),
    ]
    assert {t.device for t in staged} == {"/device:CPU:1"}
    assert put_op.device == "/device:CPU:1"
    assert put_op.name == "tower_1/staging_area/put"
