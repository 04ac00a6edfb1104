"""Any model on the towers: TF1 layers, batch norm, regularizers, bfloat16."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from helpers.towers import cifar10_step_graph

from cifar10_models import registry
from multigpu.graph import any_model, placement, summaries, towers
from multigpu.train_dir import checkpoints
from verification import sessions

# The L2 factor of the test models' kernels, large enough to show in a loss.
WEIGHT_DECAY = 1e-2

# The variables of `layers_model`.
LAYERS_MODEL_VARIABLES = [
    "conv/kernel",
    "conv/bias",
    "bn/gamma",
    "bn/beta",
    "bn/moving_mean",
    "bn/moving_variance",
    "dense/kernel",
    "dense/bias",
]


def l2_regularizer(weights):
    return WEIGHT_DECAY * tf.nn.l2_loss(weights)


def layers_model(images, is_training):
    """A user's model: conv - batch norm - relu - mean - dense, L2 kernels."""
    x = tf.compat.v1.layers.conv2d(
        images, 4, 3, kernel_regularizer=l2_regularizer, name="conv"
    )
    x = tf.compat.v1.layers.batch_normalization(
        x, training=is_training, name="bn"
    )
    x = tf.reduce_mean(tf.nn.relu(x), axis=[1, 2])
    return tf.compat.v1.layers.dense(
        x, 10, kernel_regularizer=l2_regularizer, name="dense"
    )


def layers_model_without_batch_norm(images, is_training):
    """conv - relu - mean - dense, L2 kernels."""
    del is_training
    x = tf.compat.v1.layers.conv2d(
        images, 4, 3, kernel_regularizer=l2_regularizer, name="conv"
    )
    x = tf.reduce_mean(tf.nn.relu(x), axis=[1, 2])
    return tf.compat.v1.layers.dense(
        x, 10, kernel_regularizer=l2_regularizer, name="dense"
    )


def keras_objects_model(images, is_training):
    """Keras 2 layer objects: their variables bypass get_variable."""
    del is_training
    x = tf_keras.layers.Conv2D(4, 3, name="conv")(images)
    return tf_keras.layers.Dense(10, name="dense")(tf.reduce_mean(x, [1, 2]))


def batch(size, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.normal(size=[size, 24, 24, 3]).astype(np.float32)
    labels = rng.integers(0, 10, size=[size]).astype(np.int32)
    return images, labels


def with_tutorial_recipe(model_fn):
    return registry.TUTORIAL._replace(name="test", build=model_fn)


def two_tower_graph(model_fn, devices, variable_device, **options):
    """Builds one step of cifar10_multi_gpu_train.py's towers on 4 images."""
    graph = tf.Graph()
    with graph.as_default():
        images, labels = batch(4)
        loss, train_op, _ = cifar10_step_graph(
            images,
            labels,
            num_towers=2,
            devices=devices,
            variable_device=variable_device,
            model=with_tutorial_recipe(model_fn),
            **options,
        )
    return graph, loss, train_op


def variable(graph, name):
    """The variable `name` of the graph (its name in the checkpoints, e.g.
    'conv/kernel' for 'model/conv/kernel')."""
    (var,) = [
        v
        for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
        if checkpoints.saved_name(v) == name
    ]
    return var


def three_cpu_session():
    config = placement.session_config(["/cpu:0", "/cpu:1", "/cpu:2"])
    return tf.compat.v1.Session(config=config)


@pytest.mark.parametrize(
    "choice, expected", [("cpu", "/device:CPU:0"), ("tower", "/device:CPU:1")]
)
def test_every_variable_op_of_a_layers_model_is_on_the_variable_device(
    choice, expected
):
    devices = ["/cpu:1", "/cpu:2"]
    graph, _, _ = two_tower_graph(
        layers_model, devices, placement.variable_device(choice, devices)
    )
    placed = {
        op.name: op.device
        for op in graph.get_operations()
        if op.type in placement.VARIABLE_OPS
        and summaries.without_blocks(op.name) in LAYERS_MODEL_VARIABLES
    }
    assert placed == {
        "model/" + name: expected for name in LAYERS_MODEL_VARIABLES
    }


def test_the_moving_mean_follows_the_last_towers_batch_with_every_step():
    graph, _, train_op = two_tower_graph(
        layers_model, ["/cpu:1", "/cpu:2"], "/cpu:0"
    )
    with graph.as_default(), three_cpu_session() as sess:
        sessions.initialise(sess)
        moving_mean = variable(graph, "bn/moving_mean")
        last_conv = graph.get_tensor_by_name("towers/tower_1/conv/BiasAdd:0")
        first_conv = graph.get_tensor_by_name("towers/tower_0/conv/BiasAdd:0")
        _, last, first = sess.run([train_op, last_conv, first_conv])
        # Keras' batch norm momentum 0.99: one step moves 1% of the way.
        expected = 0.01 * last.astype(np.float64).mean(axis=(0, 1, 2))
        # A channel's mean can cancel to near 0, where float32 sums in
        # another order differ by more than 1e-5 of it: the bound is also 1e-6
        # (about 8 float32 epsilons) of the size of the terms summed.
        atol = 1e-6 * 0.01 * np.abs(last).mean(axis=(0, 1, 2)).max()
        np.testing.assert_allclose(
            sess.run(moving_mean), expected, rtol=1e-5, atol=atol
        )
        assert not np.allclose(expected, 0.01 * first.mean(axis=(0, 1, 2)))
        # The weights' moving average covers the statistics, for the eval.
        shadow = variable(graph, "bn/moving_mean/ExponentialMovingAverage")
        # Its decay at global step 1: min(0.9999, (1 + 1) / (10 + 1)).
        np.testing.assert_allclose(
            sess.run(shadow), (1 - 2 / 11) * expected, rtol=1e-5, atol=atol
        )


def test_the_last_towers_loss_is_its_cross_entropy_plus_the_l2_terms():
    graph, loss, _ = two_tower_graph(
        layers_model, ["/cpu:1", "/cpu:2"], "/cpu:0"
    )
    with graph.as_default(), three_cpu_session() as sess:
        sessions.initialise(sess)
        # 'total_loss' is the last tower's, as its summary shows it.
        last, mean, cross_entropies, conv, dense = sess.run(
            [
                "summaries/total_loss:0",
                loss,
                [
                    "towers/tower_0/cross_entropy:0",
                    "towers/tower_1/cross_entropy:0",
                ],
                variable(graph, "conv/kernel"),
                variable(graph, "dense/kernel"),
            ]
        )
    l2_terms = WEIGHT_DECAY * (np.sum(conv**2) + np.sum(dense**2)) / 2
    assert l2_terms > 1e-3
    assert last == pytest.approx(cross_entropies[1] + l2_terms, rel=1e-6)
    assert mean == pytest.approx(np.mean(cross_entropies) + l2_terms, rel=1e-6)


def test_in_bfloat16_a_layers_model_trains_and_saves_float32_only(tmp_path):
    graph, loss, train_op = two_tower_graph(
        layers_model,
        ["/cpu:1", "/cpu:2"],
        "/cpu:0",
        compute_dtype=tf.bfloat16,
    )
    convolutions = [op for op in graph.get_operations() if op.type == "Conv2D"]
    assert [op.get_attr("T") for op in convolutions] == [tf.bfloat16] * 2
    with graph.as_default(), three_cpu_session() as sess:
        sessions.initialise(sess)
        kernel = variable(graph, "conv/kernel")
        before = sess.run(kernel)
        losses = [sess.run([loss, train_op])[0] for _ in range(3)]
        assert np.all(np.isfinite(losses))
        assert not np.allclose(sess.run(kernel), before)
        prefix = tf.compat.v1.train.Saver(checkpoints.saved_variables()).save(
            sess, str(tmp_path / "ckpt")
        )
    dtypes = tf.compat.v1.train.NewCheckpointReader(
        prefix
    ).get_variable_to_dtype_map()
    assert set(LAYERS_MODEL_VARIABLES) <= set(dtypes)
    assert {
        name: dtype for name, dtype in dtypes.items() if dtype != tf.float32
    } == {"global_step": tf.int64}


@pytest.mark.parametrize(
    "compute_dtype, scope",
    # float32: the layers regularize the shared variable once, in tower_0;
    # bfloat16: each tower's cast anew, in its own scope.
    [(tf.float32, "towers/tower_0/"), (tf.bfloat16, "towers/tower_1/")],
)
def test_each_tower_adds_every_regularization_term_once(compute_dtype, scope):
    graph, _, _ = two_tower_graph(
        layers_model,
        ["/cpu:1", "/cpu:2"],
        "/cpu:0",
        compute_dtype=compute_dtype,
    )
    with graph.as_default():
        terms = towers.regularization_losses("towers/tower_1/")
    # Each term, float32 (cast from bfloat16 where the layer made it so).
    sources = [t.op.inputs[0] if t.op.type == "Cast" else t for t in terms]
    assert [source.op.name for source in sources] == [
        scope + "conv/kernel/Regularizer/mul",
        scope + "dense/kernel/Regularizer/mul",
    ]
    assert {term.dtype for term in terms} == {tf.float32}


def refusal(model_fn, compute_dtype=tf.float32):
    """The message of the ValueError that refuses model_fn, named
    --model=mine:net, on a tower of two images."""
    with tf.Graph().as_default():
        with pytest.raises(ValueError) as error:
            any_model.call_model(
                model_fn,
                tf.zeros([2, 24, 24, 3]),
                True,
                10,
                compute_dtype,
                name="--model=mine:net",
            )
    return str(error.value)


def test_a_model_of_keras_layer_objects_is_refused_in_one_line():
    assert refusal(keras_objects_model) == (
        "--model=mine:net creates variables without "
        "tf.compat.v1.get_variable (conv/kernel, conv/bias, dense/kernel, "
        "dense/bias): Keras layer objects or tf.Variable, which the towers "
        "cannot share, and whose batch-norm updates and regularizers they "
        "cannot see; write its layers with the tf.compat.v1.layers "
        "functions (tf.compat.v1.layers.conv2d, ...) instead"
    )


@pytest.mark.parametrize(
    "logits, found",
    [
        (lambda images: tf.zeros([2, 9]), "float32 [2, 9]"),
        (lambda images: tf.zeros([2, 10], tf.int32), "int32 [2, 10]"),
        (lambda images: [images], "list"),
    ],
)
def test_logits_of_the_wrong_shape_or_dtype_are_named_in_one_line(
    logits, found
):
    assert refusal(lambda images, is_training: logits(images)) == (
        "--model=mine:net must return float logits of shape [2, 10], "
        "returned %s" % found
    )


def test_two_variables_saved_under_one_name_are_refused_naming_both():
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope(summaries.MODEL):
            tf.compat.v1.get_variable("w", [2])
            with tf.compat.v1.variable_scope(summaries.SUMMARIES):
                tf.compat.v1.get_variable("w", [2])
        with pytest.raises(ValueError) as error:
            checkpoints.saved_variables()
    assert str(error.value) == (
        "the variables model/w and model/summaries/w would both be saved as "
        "w (the checkpoints' names leave out the blocks model/, update/, "
        "summaries/), so one would be lost; rename one of them, e.g. by "
        "another variable scope"
    )


def test_a_model_whose_layers_compute_in_float32_under_use_fp16_is_refused():
    # A glue that resizes the images (float32 whatever its input) and does
    # not cast back: its layers would train float32 under "bfloat16".
    def resized(images, is_training):
        images = tf.image.resize(images, [12, 12])
        weights = tf.compat.v1.get_variable(
            "weights", [12 * 12 * 3, 10], images.dtype
        )
        return tf.matmul(tf.reshape(images, [2, -1]), weights)

    assert refusal(resized, tf.bfloat16) == (
        "--model=mine:net computes in float32 under --use_fp16: given "
        "bfloat16 images, its 1 matmul and convolution op(s) are all "
        "float32; cast back to the images' dtype after any op that returns "
        "float32 (tf.image.resize does), or train without --use_fp16"
    )
