"""The tower machinery: equivalence with one big batch, placement, devices."""

import numpy as np
import pytest
import tensorflow as tf

import cifar10
import towers

PER_TOWER_BATCH = 8


def cifar10_step_graph(images, labels, num_towers=1, task=towers.LOCAL_TASK):
    """Builds one training step of the CIFAR-10 model on a fixed batch.

    The step of `cifar10_multi_gpu_train.build_graph` without its input
    pipeline: the batch is split evenly, tower i on virtual CPU device
    /cpu:i gets the i-th slice. Call it inside the task's device function
    (`towers.device_setter`).

    Args:
      images: float32 [n, 24, 24, 3], n divisible by num_towers.
      labels: int32 [n].
      num_towers: int, the towers of this graph.
      task: a `towers.ClusterTask`; a sync worker's optimizer is wrapped by
        `towers.sync_optimizer`.

    Returns:
      loss: float32 scalar, the mean of the towers' total losses.
      train_op: the op of one step.
      hooks: the session hooks of `towers.sync_hooks` ([] unless sync).
    """
    global_step = tf.compat.v1.train.get_or_create_global_step()
    opt = towers.sync_optimizer(
        cifar10.optimizer(
            cifar10.learning_rate(
                global_step, images.shape[0] * task.replicas_per_step
            )
        ),
        task,
    )
    batches = iter(
        zip(np.split(images, num_towers), np.split(labels, num_towers))
    )

    def tower_loss(scope):
        tower_images, tower_labels = next(batches)
        cifar10.loss(cifar10.inference(tower_images), tower_labels)
        return towers.tower_total_loss(scope)

    devices = ["/cpu:%d" % i for i in range(num_towers)]
    tower_losses, tower_grads, _ = towers.build_towers(devices, opt, tower_loss)
    grads = towers.average_gradients(tower_grads)
    train_op = cifar10.apply_gradients(opt, grads, global_step)
    loss = tf.reduce_mean(tf.stack(tower_losses))
    return loss, train_op, towers.sync_hooks(opt, task)


def cifar10_step(num_towers, images, labels, initial_values):
    """Runs one training step of the CIFAR-10 model on num_towers towers.

    Args:
      num_towers: int, towers on virtual CPU devices /cpu:0 ... /cpu:N-1.
      images: float32 [n, 24, 24, 3], n divisible by num_towers.
      labels: int32 [n].
      initial_values: dict variable name -> array, or None to draw them.

    Returns:
      loss: float, the mean of the towers' total losses before the step.
      values: dict variable name -> array after the step.
    """
    with tf.Graph().as_default():
        loss, train_op, _ = cifar10_step_graph(images, labels, num_towers)
        variables = tf.compat.v1.trainable_variables()
        devices = ["/cpu:%d" % i for i in range(num_towers)]
        with tf.compat.v1.Session(
            config=towers.session_config(devices)
        ) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            if initial_values is not None:
                for var in variables:
                    var.load(initial_values[var.op.name], sess)
            loss_value, _ = sess.run([loss, train_op])
            return loss_value, {v.op.name: sess.run(v) for v in variables}


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


@pytest.mark.parametrize("num_towers", [2, 4])
def test_n_towers_take_the_same_step_as_one_tower_with_n_times_the_batch(
    num_towers,
):
    rng = np.random.default_rng(num_towers)
    batch = PER_TOWER_BATCH * num_towers
    images = rng.normal(size=[batch, 24, 24, 3]).astype(np.float32)
    labels = rng.integers(0, 10, size=[batch]).astype(np.int32)
    initial = _initial_values()

    one_loss, one_values = cifar10_step(1, images, labels, initial)
    many_loss, many_values = cifar10_step(num_towers, images, labels, initial)

    assert many_loss == pytest.approx(one_loss, rel=1e-6)
    for name, value in one_values.items():
        np.testing.assert_allclose(
            many_values[name], value, rtol=1e-5, atol=1e-6, err_msg=name
        )
        # The step really moved the weights: the check is not vacuous.
        assert not np.allclose(value, initial[name], rtol=0, atol=1e-7), name


def _two_tower_graph():
    graph = tf.Graph()
    with graph.as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = cifar10.optimizer(0.1)

        def tower_loss(scope):
            images = tf.zeros([2, 24, 24, 3])
            cifar10.loss(cifar10.inference(images), tf.zeros([2], tf.int32))
            return towers.tower_total_loss(scope)

        _, tower_grads, _ = towers.build_towers(
            ["/cpu:0", "/cpu:1"], opt, tower_loss
        )
        grads = towers.average_gradients(tower_grads)
        cifar10.apply_gradients(opt, grads, global_step)
    return graph


def test_variables_exist_once_and_live_on_the_cpu():
    graph = _two_tower_graph()
    variables = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = sorted(v.op.name for v in variables)
    assert names == sorted(
        "%s/%s" % (layer, kind)
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
        "LRN",
        "LRNGrad",
    }
    compute_ops = [
        op for op in graph.get_operations() if op.type in compute_types
    ]
    for i in range(2):
        ops = [op for op in compute_ops if op.name.startswith("tower_%d/" % i)]
        forward = [op.type for op in ops if "gradients" not in op.name]
        # conv1, conv2; local3, local4, softmax_linear; pool1, pool2; norms.
        assert sorted(forward) == sorted(
            ["Conv2D"] * 2 + ["MatMul"] * 3 + ["MaxPool"] * 2 + ["LRN"] * 2
        )
        # Backward: two ops per convolution and per matmul (input and
        # weights), one per pool and per norm.
        assert len(ops) - len(forward) == 2 * 2 + 3 * 2 + 2 + 2
        assert {op.device for op in ops} == {"/device:CPU:%d" % i}
    assert all(op.name.startswith("tower_") for op in compute_ops)


def test_average_gradients_is_the_mean_and_keeps_variables_without_one():
    with tf.Graph().as_default():
        a = tf.Variable(1.0)
        b = tf.Variable(2.0)
        tower_grads = [
            [(tf.constant(1.0), a), (None, b)],
            [(tf.constant(3.0), a), (None, b)],
        ]
        averaged = towers.average_gradients(tower_grads)
        assert averaged[1] == (None, b)
        assert averaged[0][1] is a
        with tf.compat.v1.Session() as sess:
            assert sess.run(averaged[0][0]) == 2.0


def test_asking_for_more_gpus_than_visible_names_both_numbers():
    with pytest.raises(ValueError) as error:
        towers.tower_devices(3, cpu_towers=False)
    assert str(error.value) == (
        "--num_gpus=3 but 0 GPU(s) are visible; pass --cpu_towers to run "
        "the towers on virtual CPU devices"
    )


def test_cpu_towers_get_one_virtual_cpu_device_each():
    devices = towers.tower_devices(3, cpu_towers=True)
    assert devices == ["/cpu:0", "/cpu:1", "/cpu:2"]
    config = towers.session_config(devices)
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
            summary = towers.scalar_summary("sparsity", tf.constant(0.5))
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
