"""tf-slim's batch_norm, broken upstream on this TensorFlow: one line."""

import pytest
import tensorflow as tf
from conftest import error_line

from multigpu.graph import any_model

# A user's CIFAR-10 model with tf-slim's batch norm: [batch, 24, 24, 3] -> 10.
SLIM_MODEL = """
import tensorflow as tf
import tf_slim as slim


def net(images, is_training):
    x = slim.conv2d(images, 8, [3, 3], scope="conv1")
    x = slim.batch_norm(x, is_training=is_training, scope="bn1")
    x = tf.reduce_mean(x, [1, 2])
    return slim.fully_connected(x, 10, activation_fn=None, scope="logits")
"""

EXPECTED = (
    "%s calls TensorFlow's TF1 batch norm (tf-slim's batch_norm is built on "
    "it), which fails with \"No module named 'tf_keras.legacy_tf_layers'\" "
    "on TensorFlow " + tf.__version__ + ", tf-keras installed or not: an "
    "upstream bug (tensorflow/python/layers/normalization.py loads it from "
    "a path tf-keras does not have); write the layer as "
    "tf.compat.v1.layers.batch_normalization(inputs, training=is_training), "
    'the same layer, with pip install ".[layers]" (tf-keras~=2.21.0)'
)


def test_building_a_slim_batch_norm_raises_one_line_naming_the_bug(tmp_path):
    namespace = {}
    exec(SLIM_MODEL, namespace)
    with tf.Graph().as_default():
        images = tf.zeros([2, 24, 24, 3])
        with pytest.raises(ValueError) as error:
            any_model.call_model(
                namespace["net"], images, True, 10, name="--model=slim:net"
            )
    assert str(error.value) == EXPECTED % "--model=slim:net"


@pytest.mark.slow
def test_a_trainer_with_a_slim_batch_norm_model_exits_1_with_that_line(
    tmp_path,
):
    (tmp_path / "slim_models.py").write_text(SLIM_MODEL)
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--model=slim_models:net",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert line == "cifar10_multi_gpu_train.py: error: " + EXPECTED % (
        "--model=slim_models:net"
    )
