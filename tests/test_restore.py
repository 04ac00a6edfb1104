"""multigpu/train_dir/restore.py in-process: tutorial checkpoints, wrong models.

The tutorial's checkpoints are built here with its variable names (not its
code); tests/test_resume.py runs the scripts on them.
"""

import numpy as np
import pytest
import tensorflow as tf
from helpers.tutorial_checkpoints import (
    TUTORIAL_ONE_DEVICE_NAMES,
    TUTORIAL_STEP,
    build_tutorial_one_device_variables,
    saved_values,
    write_tutorial_multi_gpu_checkpoint,
)

import cifar10
import mnist_model
from multigpu.train_dir import checkpoints, restore


def _save_initialised_graph(train_dir, step):
    """Saves the default graph's variables, initialised, at global step."""
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        tf.compat.v1.train.get_global_step().load(step, sess)
        return tf.compat.v1.train.Saver().save(
            sess, str(train_dir / "model.ckpt"), step
        )


def test_a_checkpoint_of_the_tutorials_one_device_trainer_restores_whole(
    tmp_path, capsys
):
    with tf.Graph().as_default():
        build_tutorial_one_device_variables()
        checkpoint = _save_initialised_graph(tmp_path, TUTORIAL_STEP)
    restored = _resume_cifar10_graph(checkpoint)
    saved = saved_values(checkpoint)
    assert set(restored) == set(saved) == TUTORIAL_ONE_DEVICE_NAMES
    for name, value in saved.items():
        np.testing.assert_array_equal(restored[name], value, name)
    # Nothing was missing, so nothing was initialised.
    assert "initialised" not in capsys.readouterr().out


def _resume_cifar10_graph(checkpoint):
    """Resumes cifar10_train.py's graph from the checkpoint, in-process.

    Returns:
      dict, the name in the checkpoints (`checkpoints.saved_name`) -> value
      of every variable after the restore.
    """
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        logits = cifar10.inference(tf.zeros([1, 24, 24, 3]))
        loss = cifar10.loss(logits, tf.zeros([1], tf.int32))
        cifar10.train(loss, global_step, batch_size=1)
        with tf.compat.v1.Session() as sess:
            restore.resume(sess, checkpoint)
            return {
                checkpoints.saved_name(var): value
                for var, value in zip(
                    tf.compat.v1.global_variables(),
                    sess.run(tf.compat.v1.global_variables()),
                )
            }


def _resume_error(checkpoint):
    """The ValueError's message of resuming the CIFAR-10 graph."""
    with pytest.raises(ValueError) as raised:
        _resume_cifar10_graph(checkpoint)
    return str(raised.value)


def test_a_cifar100_sized_head_is_an_error_naming_its_shape(tmp_path):
    write_tutorial_multi_gpu_checkpoint(tmp_path, num_classes=100)
    checkpoint = tf.train.latest_checkpoint(str(tmp_path))
    assert _resume_error(checkpoint) == (
        "checkpoint %s does not fit this model: it holds "
        "softmax_linear/biases [100] where this model has [10], "
        "softmax_linear/biases/ExponentialMovingAverage [100] where this "
        "model has [10], softmax_linear/weights [192, 100] where this model "
        "has [192, 10] and 1 more; it seems to hold a model of 3-channel "
        "images and 100 classes (conv1/weights [5, 5, 3, 64], "
        "softmax_linear/weights [192, 100])" % checkpoint
    )


def test_an_mnist_checkpoint_in_the_cifar10_trainer_is_an_error(tmp_path):
    with tf.Graph().as_default():
        mnist_model.inference(tf.zeros([1, 784]))
        tf.compat.v1.train.get_or_create_global_step()
        checkpoint = _save_initialised_graph(tmp_path, 10)
    assert _resume_error(checkpoint) == (
        "checkpoint %s does not fit this model: it holds conv1/biases [32] "
        "where this model has [64], conv1/weights [5, 5, 1, 32] where this "
        "model has [5, 5, 3, 64], conv2/weights [5, 5, 32, 64] where this "
        "model has [5, 5, 64, 64] and 5 more; it seems to hold a model of "
        "1-channel images and 10 classes (conv1/weights [5, 5, 1, 32], "
        "softmax_linear/weights [10, 10])" % checkpoint
    )


def test_a_pretrained_path_without_a_checkpoint_is_an_error_naming_it(
    tmp_path,
):
    with pytest.raises(ValueError) as raised:
        restore.restore_fn(None, str(tmp_path), fine_tune=False)
    assert str(raised.value) == (
        "--pretrained_model_checkpoint_path=%s: the folder holds no "
        "checkpoint" % tmp_path
    )
    missing = str(tmp_path / "model.ckpt-5")
    with pytest.raises(ValueError) as raised:
        restore.restore_fn(None, missing, fine_tune=True)
    assert str(raised.value) == (
        "--pretrained_model_checkpoint_path=%s: no checkpoint there (%s.index "
        "is missing); pass a checkpoint's prefix, e.g. "
        "/tmp/cifar10_train/model.ckpt-1000, or its folder" % (missing, missing)
    )


def test_fine_tune_without_a_pretrained_checkpoint_is_an_error():
    with pytest.raises(ValueError) as raised:
        restore.restore_fn(None, "", fine_tune=True)
    assert str(raised.value) == (
        "--fine_tune needs --pretrained_model_checkpoint_path, the "
        "checkpoint whose other layers it starts from"
    )


def test_the_learning_rate_decays_at_the_step_of_the_new_examples_per_step():
    # 350 epochs of 50,000 examples: 68,359 steps of 256 examples (2 towers
    # of 128), 136,718 steps of 128 (one device). A run resumed with 256
    # examples per step at step 100,000 is past its first decay.
    rates = {}
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        for examples_per_step in (128, 256):
            rates[examples_per_step] = cifar10.learning_rate(
                global_step, examples_per_step
            )
        with tf.compat.v1.Session() as sess:
            found = {}
            for step in (68358, 68359, 100000, 136718):
                global_step.load(step, sess)
                found[step] = sess.run(rates)
    assert found[68358] == {128: pytest.approx(0.1), 256: pytest.approx(0.1)}
    assert found[68359] == {128: pytest.approx(0.1), 256: pytest.approx(0.01)}
    assert found[100000] == {128: pytest.approx(0.1), 256: pytest.approx(0.01)}
    assert found[136718] == {
        128: pytest.approx(0.01),
        256: pytest.approx(0.001),
    }


def _small_classifier():
    """hidden/weights [4, 3] and logits/weights [3, 2], under a loss."""
    hidden = tf.compat.v1.get_variable("hidden/weights", [4, 3])
    logits = tf.matmul(tf.ones([2, 4]) @ hidden, _logits_weights())
    tf.compat.v1.losses.sparse_softmax_cross_entropy(
        tf.zeros([2], tf.int32), logits
    )
    return hidden


def _logits_weights():
    return tf.compat.v1.get_variable("logits/weights", [3, 2])


def _save_small_classifier(train_dir, scope=""):
    """A checkpoint of `_small_classifier`'s variables under scope; returns
    it and its values."""
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope(scope):
            _small_classifier()
        tf.compat.v1.train.get_or_create_global_step()
        checkpoint = _save_initialised_graph(train_dir, 3)
    return checkpoint, saved_values(checkpoint)


def _warm_start_small_classifier(checkpoint, fine_tune):
    """Warm starts `_small_classifier` from the checkpoint by `restore_fn`;
    returns the name -> value of its weights after."""
    with tf.Graph().as_default():
        _small_classifier()
        tf.compat.v1.train.get_or_create_global_step()
        with tf.compat.v1.Session() as sess:
            restore.restore_fn(None, checkpoint, fine_tune)(sess)
            weights = tf.compat.v1.trainable_variables()
            return dict(zip([v.op.name for v in weights], sess.run(weights)))


def test_a_warm_start_from_a_checkpoint_of_other_names_is_an_error_naming_them(
    tmp_path,
):
    checkpoint, _ = _save_small_classifier(tmp_path, "pretrained")

    with pytest.raises(ValueError) as raised:
        _warm_start_small_classifier(checkpoint, fine_tune=False)

    assert str(raised.value) == (
        "checkpoint %s does not fit this model: it lacks hidden/weights "
        "[4, 3], logits/weights [3, 2]; it seems to hold no model of this "
        "suite (3 variables, e.g. global_step, pretrained/hidden/weights, "
        "pretrained/logits/weights)" % checkpoint
    )


def test_fine_tune_starts_the_logits_layer_afresh_and_keeps_the_others(
    tmp_path, capsys
):
    checkpoint, saved = _save_small_classifier(tmp_path)

    started = _warm_start_small_classifier(checkpoint, fine_tune=True)

    np.testing.assert_array_equal(
        started["hidden/weights"], saved["hidden/weights"]
    )
    assert not np.array_equal(
        started["logits/weights"], saved["logits/weights"]
    )
    assert capsys.readouterr().out.split("\n")[1:] == [
        "Warm start left at their initial values: logits/weights (--fine_tune: "
        "the layer that makes the logits)",
        "",
    ]
