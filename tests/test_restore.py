"""One checkpoint, any trainer: resume, warm start, fine-tune, wrong models.

The checkpoints are written by the scripts run as subprocesses on the
built-in sample sets, with tiny batches and a few steps each.
"""

import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_steps, read_events, run_script
from test_cifar10_train import _eval as cifar10_eval
from test_cluster import _run_to_the_end, make_cluster  # noqa: F401

import cifar10
import mnist_input
from multigpu import restore

# The weights of the tutorial's model, as its graph names them.
TUTORIAL_WEIGHTS = {
    "conv1/weights": [5, 5, 3, 64],
    "conv1/biases": [64],
    "conv2/weights": [5, 5, 64, 64],
    "conv2/biases": [64],
    "local3/weights": [2304, 384],
    "local3/biases": [384],
    "local4/weights": [384, 192],
    "local4/biases": [192],
    "softmax_linear/weights": [192, 10],
    "softmax_linear/biases": [10],
}
# The losses the tutorial's one-device trainer averages (0.9, named 'avg'):
# the cross-entropy, a weight-decay term per layer (zero for conv1, conv2
# and softmax_linear) and their total.
TUTORIAL_LOSSES = [
    "cross_entropy",
    "conv1/weight_loss",
    "conv2/weight_loss",
    "local3/weight_loss",
    "local4/weight_loss",
    "softmax_linear/weight_loss",
    "total_loss",
]
# Every variable of a checkpoint of the tutorial's one-device trainer.
TUTORIAL_ONE_DEVICE_NAMES = (
    set(TUTORIAL_WEIGHTS)
    | {name + restore.SHADOW_SUFFIX for name in TUTORIAL_WEIGHTS}
    | {name + "/avg" for name in TUTORIAL_LOSSES}
    | {"global_step"}
)
# The MNIST runs: a small set, 10 steps an epoch on one tower.
MNIST_SPLIT_SIZES = {"train": 200, "validation": 20, "test": 50}
MNIST_BATCH_SIZE = 20
# The steps of the tutorial checkpoint built by the test.
TUTORIAL_STEP = 4


def _train(script, data_dir, train_dir, *flags):
    return run_script(
        script,
        "--fake_data",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--clip_gradients=5",
        *flags,
    )


def _multi(data_dir, train_dir, num_gpus, *flags):
    return _train(
        "cifar10_multi_gpu_train.py",
        data_dir,
        train_dir,
        "--num_gpus=%d" % num_gpus,
        "--cpu_towers",
        *flags,
    )


def _eval(data_dir, checkpoint_dir, eval_dir, **kwargs):
    return cifar10_eval(
        data_dir,
        checkpoint_dir,
        eval_dir,
        "--num_examples=20",
        "--batch_size=10",
        **kwargs,
    )


def _mnist(data_dir, train_dir, *flags, **kwargs):
    """Runs the MNIST trainer on virtual CPU towers for one epoch."""
    return run_script(
        "mnist_multi_gpu_train.py",
        "--cpu_towers",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=%d" % MNIST_BATCH_SIZE,
        "--num_epochs=1",
        *flags,
        **kwargs,
    )


def _values(checkpoint):
    """dict name -> numpy value of every variable of the checkpoint."""
    reader = tf.train.load_checkpoint(str(checkpoint))
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
    }


def _names(train_dir):
    return set(_values(tf.train.latest_checkpoint(str(train_dir))))


def _last_line(result):
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def two_towers(cifar10_data_dir, tmp_path_factory):
    """A train_dir of 3 steps of the 2-tower trainer (batches of 2)."""
    train_dir = tmp_path_factory.mktemp("two_towers")
    _multi(cifar10_data_dir, train_dir, 2, "--batch_size=2", "--max_steps=3")
    return train_dir


@pytest.fixture(scope="module")
def mnist_run(tmp_path_factory):
    """(data_dir, train_dir) of a 10-step MNIST run, one tower.

    The data are MNIST_SPLIT_SIZES examples of the built-in sample set.
    """
    root = tmp_path_factory.mktemp("mnist")
    for seed, (split, size) in enumerate(MNIST_SPLIT_SIZES.items()):
        os.makedirs(root / "data", exist_ok=True)
        mnist_input.write_records(
            str(root / "data" / mnist_input.SPLIT_FILES[split]),
            *mnist_input.fake_examples(size, seed),
        )
    _mnist(root / "data", root / "train")
    return root / "data", root / "train"


@pytest.mark.slow
def test_a_checkpoint_goes_from_2_to_4_towers_to_one_device_to_a_cluster(
    two_towers,
    cifar10_data_dir,
    make_cluster,  # noqa: F811
    tmp_path,
):
    cluster = make_cluster(
        2,
        "--sync_replicas",
        "--batch_size=2",
        "--max_steps=9",
        "--clip_gradients=5",
    )
    train_dir = cluster.train_dir(0)
    shutil.copytree(two_towers, train_dir)
    assert checkpoint_steps(train_dir)[-1] == 3
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES

    # The flag is for new runs: a train_dir with checkpoints resumes.
    four = _multi(
        cifar10_data_dir,
        train_dir,
        4,
        "--batch_size=1",
        "--max_steps=5",
        "--pretrained_model_checkpoint_path=%s" % two_towers,
    )
    assert "training from step 3" in four.stdout
    assert (
        "--pretrained_model_checkpoint_path=%s is ignored" % (two_towers)
        in four.stdout
    )
    assert checkpoint_steps(train_dir)[-1] == 5

    one = _train(
        "cifar10_train.py",
        cifar10_data_dir,
        train_dir,
        "--batch_size=3",
        "--max_steps=7",
    )
    assert "training from step 5" in one.stdout
    assert checkpoint_steps(train_dir)[-1] == 7
    # The names of the tutorial's one-device trainer, so that its graph
    # restores the checkpoint.
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES
    _restore_in_tutorial_graph(tf.train.latest_checkpoint(str(train_dir)))

    steps = _run_to_the_end(cluster, 2)
    assert "training from step 7" in cluster.log("worker0")
    assert max(global_step for _, global_step in steps) == 9
    assert checkpoint_steps(train_dir)[-1] == 9
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES

    _eval(cifar10_data_dir, train_dir, tmp_path / "eval")
    [precision] = read_events(tmp_path / "eval").Scalars("Precision @ 1")
    assert precision.step == 9


def _build_tutorial_one_device_variables():
    """The variables of the tutorial's one-device trainer, in the graph."""
    weights = [
        tf.compat.v1.get_variable(name, shape)
        for name, shape in TUTORIAL_WEIGHTS.items()
    ]
    tf.compat.v1.train.get_or_create_global_step()
    tf.compat.v1.train.ExponentialMovingAverage(
        cifar10.MOVING_AVERAGE_DECAY
    ).apply(weights)
    losses = [tf.constant(1.0, name=name) for name in TUTORIAL_LOSSES]
    tf.compat.v1.train.ExponentialMovingAverage(0.9, name="avg").apply(losses)


def _restore_in_tutorial_graph(checkpoint):
    """Restores the checkpoint into the tutorial's one-device variables."""
    with tf.Graph().as_default():
        _build_tutorial_one_device_variables()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            # Restores every variable or fails.
            saver.restore(sess, checkpoint)
            step = sess.run(tf.compat.v1.train.get_global_step())
    assert step == int(checkpoint.rsplit("-", 1)[1])


def test_a_checkpoint_of_the_tutorials_one_device_trainer_restores_whole(
    tmp_path, capsys
):
    with tf.Graph().as_default():
        _build_tutorial_one_device_variables()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.get_global_step().load(TUTORIAL_STEP, sess)
            checkpoint = tf.compat.v1.train.Saver().save(
                sess, str(tmp_path / "model.ckpt"), TUTORIAL_STEP
            )
    restored = _resume_cifar10_graph(checkpoint)
    saved = _values(checkpoint)
    assert set(restored) == set(saved) == TUTORIAL_ONE_DEVICE_NAMES
    for name, value in saved.items():
        np.testing.assert_array_equal(restored[name], value, name)
    # Nothing was missing, so nothing was initialised.
    assert "initialised" not in capsys.readouterr().out


def _write_tutorial_multi_gpu_checkpoint(train_dir, num_classes=10):
    """Writes what the tutorial's multi-GPU trainer saves, at TUTORIAL_STEP.

    Its weights and their moving averages, a float32 global_step, no loss
    averages. Returns the checkpoint's values.
    """
    rng = np.random.default_rng(0)
    shapes = dict(TUTORIAL_WEIGHTS)
    shapes["softmax_linear/weights"] = [192, num_classes]
    shapes["softmax_linear/biases"] = [num_classes]
    with tf.Graph().as_default():
        weights = [
            tf.compat.v1.get_variable(
                name,
                initializer=rng.normal(0, 0.01, shape).astype(np.float32),
            )
            for name, shape in shapes.items()
        ]
        tf.compat.v1.get_variable(
            "global_step",
            [],
            initializer=tf.constant_initializer(TUTORIAL_STEP),
            trainable=False,
        )
        update = tf.compat.v1.train.ExponentialMovingAverage(
            cifar10.MOVING_AVERAGE_DECAY
        ).apply(weights)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(update)
            tf.compat.v1.train.Saver().save(
                sess, str(train_dir / "model.ckpt"), global_step=TUTORIAL_STEP
            )
    values = _values(tf.train.latest_checkpoint(str(train_dir)))
    assert values["global_step"].dtype == np.float32
    return values


@pytest.mark.slow
def test_a_checkpoint_of_the_tutorials_multi_gpu_trainer_evaluates_and_resumes(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "tutorial"
    train_dir.mkdir()
    _write_tutorial_multi_gpu_checkpoint(train_dir)
    _eval(cifar10_data_dir, train_dir, tmp_path / "eval")
    [precision] = read_events(tmp_path / "eval").Scalars("Precision @ 1")
    assert precision.step == TUTORIAL_STEP

    result = _multi(
        cifar10_data_dir,
        train_dir,
        2,
        "--batch_size=2",
        "--max_steps=%d" % (TUTORIAL_STEP + 2),
    )
    assert "training from step %d" % TUTORIAL_STEP in result.stdout
    assert (
        "initialised 7 variable(s) it does not hold (summary or optimizer "
        "state): conv1/weight_loss/avg, conv2/weight_loss/avg, "
        "cross_entropy/avg and 4 more" in result.stdout
    )
    saved = _values(tf.train.latest_checkpoint(str(train_dir)))
    assert saved["global_step"] == TUTORIAL_STEP + 2
    assert saved["global_step"].dtype == np.int64
    assert set(saved) == TUTORIAL_ONE_DEVICE_NAMES


def _assert_warm_started(source, started, fresh_layers=()):
    """Each weight and shadow of `started` is `source`'s, but fresh_layers'."""
    assert started["global_step"] == 0
    for name in TUTORIAL_WEIGHTS:
        for each in (name, name + restore.SHADOW_SUFFIX):
            if name.split("/")[0] in fresh_layers:
                assert not np.allclose(started[each], source[each]), each
            else:
                np.testing.assert_array_equal(started[each], source[each], each)


@pytest.mark.slow
def test_warm_start_takes_the_weights_and_averages_of_another_tower_count(
    two_towers, cifar10_data_dir, tmp_path
):
    source = tf.train.latest_checkpoint(str(two_towers))
    result = _train(
        "cifar10_train.py",
        cifar10_data_dir,
        tmp_path / "warm",
        "--batch_size=2",
        "--max_steps=1",
        "--pretrained_model_checkpoint_path=%s" % two_towers,
    )
    assert "training from step 0" in result.stdout
    assert (
        "Warm start from %s: restored 10 weight(s) and 10 moving average(s);"
        % source
        in result.stdout
    )
    # The saver writes the step the run starts at: the warm-started values.
    _assert_warm_started(
        _values(source), _values(tmp_path / "warm" / "model.ckpt-0")
    )


@pytest.mark.slow
def test_fine_tune_initialises_softmax_linear_afresh(
    two_towers, cifar10_data_dir, tmp_path
):
    source = tf.train.latest_checkpoint(str(two_towers))
    result = _multi(
        cifar10_data_dir,
        tmp_path / "tuned",
        1,
        "--batch_size=2",
        "--max_steps=1",
        "--pretrained_model_checkpoint_path=%s" % source,
        "--fine_tune",
    )
    assert (
        "initialised afresh (--fine_tune): softmax_linear/biases, "
        "softmax_linear/weights" in result.stdout
    )
    tuned = _values(tmp_path / "tuned" / "model.ckpt-0")
    _assert_warm_started(_values(source), tuned, ["softmax_linear"])
    # The biases start at 0 again, and each shadow at its weight.
    np.testing.assert_array_equal(tuned["softmax_linear/biases"], 0)
    np.testing.assert_array_equal(
        tuned["softmax_linear/weights" + restore.SHADOW_SUFFIX],
        tuned["softmax_linear/weights"],
    )


@pytest.mark.slow
def test_an_mnist_checkpoint_of_one_tower_resumes_on_two(mnist_run, tmp_path):
    data_dir, source_dir = mnist_run
    train_dir = tmp_path / "train"
    shutil.copytree(source_dir, train_dir)
    assert checkpoint_steps(train_dir)[-1] == 10
    result = _mnist(data_dir, train_dir, "--num_gpus=2")
    # One more epoch of the 200 training images, 40 a step.
    assert "training from step 10" in result.stdout
    assert "Done training for 1 epochs, 5 steps." in result.stdout
    assert checkpoint_steps(train_dir)[-1] == 15
    assert "(50 examples, step 15)" in result.stdout


@pytest.mark.slow
def test_mnist_fine_tunes_from_an_mnist_checkpoint(mnist_run, tmp_path):
    data_dir, source_dir = mnist_run
    source = tf.train.latest_checkpoint(str(source_dir))
    _mnist(
        data_dir,
        tmp_path / "tuned",
        "--num_gpus=2",
        "--pretrained_model_checkpoint_path=%s" % source,
        "--fine_tune",
    )
    before, after = _values(source), _values(tmp_path / "tuned/model.ckpt-0")
    assert after["global_step"] == 0
    np.testing.assert_array_equal(
        after["local3/weights"], before["local3/weights"]
    )
    assert not np.allclose(
        after["softmax_linear/weights"], before["softmax_linear/weights"]
    )
    # The optimizer's slots start at zero.
    np.testing.assert_array_equal(after["local3/weights/Momentum"], 0)


@pytest.mark.slow
def test_an_mnist_checkpoint_in_the_cifar10_eval_is_one_line(
    mnist_run, cifar10_data_dir, tmp_path
):
    _, train_dir = mnist_run
    result = _eval(
        cifar10_data_dir, train_dir, tmp_path / "eval", expect_success=False
    )
    assert result.returncode == 1
    assert _last_line(result) == (
        "cifar10_eval.py: error: checkpoint %s does not fit this model: it "
        "lacks conv1/biases/ExponentialMovingAverage [64], "
        "conv1/weights/ExponentialMovingAverage [5, 5, 3, 64], "
        "conv2/biases/ExponentialMovingAverage [64] and 7 more; it seems to "
        "hold a model of 1-channel images and 10 classes (conv1/weights "
        "[5, 5, 1, 32], softmax_linear/weights [10, 10])"
        % tf.train.latest_checkpoint(str(train_dir))
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_cifar10_checkpoint_in_the_mnist_trainer_is_one_line(
    mnist_run, two_towers, tmp_path
):
    data_dir, _ = mnist_run
    result = _mnist(
        data_dir,
        tmp_path / "train",
        "--pretrained_model_checkpoint_path=%s" % two_towers,
        expect_success=False,
    )
    assert result.returncode == 1
    assert _last_line(result) == (
        "mnist_multi_gpu_train.py: error: checkpoint %s does not fit this "
        "model: it holds conv1/biases [64] where this model has [32], "
        "conv1/weights [5, 5, 3, 64] where this model has [5, 5, 1, 32], "
        "conv2/weights [5, 5, 64, 64] where this model has [5, 5, 32, 64] "
        "and 5 more; it seems to hold a model of 3-channel images and 10 "
        "classes (conv1/weights [5, 5, 3, 64], softmax_linear/weights "
        "[192, 10])" % tf.train.latest_checkpoint(str(two_towers))
    )
    assert "Traceback" not in result.stderr


def _resume_cifar10_graph(checkpoint):
    """Resumes cifar10_train.py's graph from the checkpoint, in-process.

    Returns:
      dict, name -> value of every variable after the restore.
    """
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        logits = cifar10.inference(tf.zeros([1, 24, 24, 3]))
        loss = cifar10.loss(logits, tf.zeros([1], tf.int32))
        cifar10.train(loss, global_step, batch_size=1)
        with tf.compat.v1.Session() as sess:
            restore.resume(sess, checkpoint)
            return {
                var.op.name: value
                for var, value in zip(
                    tf.compat.v1.global_variables(),
                    sess.run(tf.compat.v1.global_variables()),
                )
            }


def test_a_cifar100_sized_head_is_an_error_naming_its_shape(tmp_path):
    _write_tutorial_multi_gpu_checkpoint(tmp_path, num_classes=100)
    checkpoint = tf.train.latest_checkpoint(str(tmp_path))
    with pytest.raises(ValueError) as raised:
        _resume_cifar10_graph(checkpoint)
    assert str(raised.value) == (
        "checkpoint %s does not fit this model: it holds "
        "softmax_linear/biases [100] where this model has [10], "
        "softmax_linear/biases/ExponentialMovingAverage [100] where this "
        "model has [10], softmax_linear/weights [192, 100] where this model "
        "has [192, 10] and 1 more; it seems to hold a model of 3-channel "
        "images and 100 classes (conv1/weights [5, 5, 3, 64], "
        "softmax_linear/weights [192, 100])" % checkpoint
    )


@pytest.mark.slow
def test_an_mnist_checkpoint_in_the_cifar10_trainer_is_an_error(mnist_run):
    _, train_dir = mnist_run
    checkpoint = tf.train.latest_checkpoint(str(train_dir))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "it seems to hold a model of 1-channel images and 10 classes"
        ),
    ) as raised:
        _resume_cifar10_graph(checkpoint)
    assert str(raised.value).startswith(
        "checkpoint %s does not fit this model: it holds conv1/biases [32] "
        "where this model has [64]," % checkpoint
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
