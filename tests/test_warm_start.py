"""Warm start carries the whole model; --fine_tune, the logits layer of any.

A warm start restored only the trainable variables: a ResNet's batch-norm
statistics and a frozen layer came back re-initialised, and --fine_tune
re-initialised `softmax_linear/` only, which the ResNets and users' models
do not have. Checkpoints are compared value by value with their source.
"""

import numpy as np
import pytest
import tensorflow as tf
from conftest import SHADOW, assert_values_kept, run_script
from helpers.tutorial_checkpoints import saved_values

# What a warm start starts afresh: the step, the optimizer's slots, the
# loss averages.
RUN_STATE = ("global_step", "/Momentum", "/avg")

# A user's model: a frozen backbone (trainable=False) and a classifier.
FROZEN_BACKBONE_MODEL = """
import tensorflow as tf


def net(images, is_training):
    del is_training
    features = tf.reshape(images, [-1, 24 * 24 * 3])
    backbone = tf.compat.v1.get_variable(
        "backbone/weights", [24 * 24 * 3, 16], trainable=False
    )
    hidden = tf.nn.relu(tf.matmul(features, backbone))
    weights = tf.compat.v1.get_variable("classifier/weights", [16, 10])
    biases = tf.compat.v1.get_variable(
        "classifier/biases", [10], initializer=tf.compat.v1.zeros_initializer()
    )
    return tf.nn.bias_add(tf.matmul(hidden, weights), biases)
"""


def _train(data_dir, train_dir, model, *flags, env=None):
    """One tower, batches of 2 of the sample set; returns stdout."""
    return run_script(
        "cifar10_train.py",
        "--fake_data",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=2",
        "--clip_gradients=5",
        "--model=%s" % model,
        *flags,
        env=env,
    ).stdout


@pytest.fixture(scope="module")
def resnet20_source(cifar10_data_dir, tmp_path_factory):
    """The checkpoint of 2 steps of resnet20: batch norm has moved."""
    train_dir = tmp_path_factory.mktemp("resnet20")
    _train(cifar10_data_dir, train_dir, "resnet20", "--max_steps=2")
    return tf.train.latest_checkpoint(str(train_dir))


def _model_values(checkpoint):
    """The checkpoint's values but the step, the slots and loss averages."""
    return {
        name: value
        for name, value in saved_values(checkpoint).items()
        if not any(each in name for each in RUN_STATE)
    }


def _warm_start_line(source, restored, frozen, averages):
    return (
        "Warm start from %s: restored %d model variable(s), %d of them not "
        "trainable (batch-norm statistics, frozen layers), and %d moving "
        "average(s); the step, the optimizer and the loss averages start "
        "afresh" % (source, restored, frozen, averages)
    )


def _warm_start(data_dir, train_dir, model, source, *flags, env=None):
    """A step of model warm-started from the source checkpoint; stdout."""
    return _train(
        data_dir,
        train_dir,
        model,
        "--max_steps=1",
        "--pretrained_model_checkpoint_path=%s" % source,
        *flags,
        env=env,
    )


def _assert_same_but(source, started, fresh_layer=()):
    """started holds source's values, but fresh_layer's and their shadows'."""
    assert set(started) == set(source)
    fresh = {name + shadow for name in fresh_layer for shadow in ("", SHADOW)}
    assert_values_kept(source, started, source, fresh)


@pytest.mark.slow
def test_warm_start_restores_resnet20s_batch_norm_statistics_and_averages(
    cifar10_data_dir, resnet20_source, tmp_path
):
    stdout = _warm_start(
        cifar10_data_dir, tmp_path, "resnet20", resnet20_source
    )
    # 59 weights and 38 moving statistics (19 batch norms), each averaged.
    assert _warm_start_line(resnet20_source, 97, 38, 97) in stdout
    assert "Warm start left" not in stdout
    source = _model_values(resnet20_source)
    assert source["bn1/moving_variance"].tolist() != [1.0] * 16
    # The saver writes the step the run starts at: the warm-started values.
    _assert_same_but(source, _model_values(tmp_path / "model.ckpt-0"))


@pytest.mark.slow
def test_fine_tune_reinitialises_resnet20s_fc_layer_only(
    cifar10_data_dir, resnet20_source, tmp_path
):
    stdout = _warm_start(
        cifar10_data_dir, tmp_path, "resnet20", resnet20_source, "--fine_tune"
    )
    assert _warm_start_line(resnet20_source, 95, 38, 95) in stdout
    assert (
        "Warm start left at their initial values: fc/bias, fc/kernel "
        "(--fine_tune: the layer that makes the logits)\n" in stdout
    )
    tuned = _model_values(tmp_path / "model.ckpt-0")
    fc = {"fc/kernel", "fc/bias"}
    _assert_same_but(_model_values(resnet20_source), tuned, fc)
    # Each starts as initialised: the biases at 0, each shadow at its
    # variable.
    np.testing.assert_array_equal(tuned["fc/bias"], 0)
    for name in fc:
        np.testing.assert_array_equal(tuned[name + SHADOW], tuned[name])


@pytest.mark.slow
def test_a_user_models_frozen_backbone_is_restored_and_its_classifier_tuned(
    cifar10_data_dir, tmp_path
):
    (tmp_path / "frozen.py").write_text(FROZEN_BACKBONE_MODEL)
    env = {"PYTHONPATH": str(tmp_path)}
    source_dir, tuned_dir = tmp_path / "source", tmp_path / "tuned"
    _train(cifar10_data_dir, source_dir, "frozen:net", "--max_steps=2", env=env)
    source = tf.train.latest_checkpoint(str(source_dir))
    stdout = _warm_start(
        cifar10_data_dir,
        tuned_dir,
        "frozen:net",
        source,
        "--fine_tune",
        env=env,
    )
    assert _warm_start_line(source, 1, 1, 1) in stdout
    assert (
        "Warm start left at their initial values: classifier/biases, "
        "classifier/weights (--fine_tune: the layer that makes the logits)\n"
        in stdout
    )
    tuned = _model_values(tuned_dir / "model.ckpt-0")
    classifier = {"classifier/weights", "classifier/biases"}
    _assert_same_but(_model_values(source), tuned, classifier)
    np.testing.assert_array_equal(tuned["classifier/biases"], 0)
