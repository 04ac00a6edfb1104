"""One checkpoint, any trainer: the scripts resume, warm start, fine-tune.

The checkpoints are written by the scripts run as subprocesses on the
built-in sample sets, with tiny batches and a few steps each.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    assert_values_kept,
    checkpoint_steps,
    read_events,
    run_script,
)
from helpers.cluster import run_to_the_end
from helpers.scripts import eval_once as cifar10_eval
from helpers.tutorial_checkpoints import (
    TUTORIAL_ONE_DEVICE_NAMES,
    TUTORIAL_STEP,
    TUTORIAL_WEIGHTS,
    restore_in_tutorial_graph,
    saved_values,
    write_tutorial_multi_gpu_checkpoint,
)

import mnist_input
from data_sets import mnist_data
from multigpu.train_dir import restore

# The MNIST runs: a small set, 10 steps an epoch on one tower.
MNIST_SPLIT_SIZES = {"train": 200, "validation": 20, "test": 50}
MNIST_BATCH_SIZE = 20


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


def eval_once(data_dir, checkpoint_dir, eval_dir, **kwargs):
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


def _names(train_dir):
    return set(saved_values(tf.train.latest_checkpoint(str(train_dir))))


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
        mnist_data.write_records(
            str(root / "data" / mnist_input.SPLIT_FILES[split]),
            *mnist_data.fake_examples(size, seed),
        )
    _mnist(root / "data", root / "train")
    return root / "data", root / "train"


def _train_workers_only(make_cluster):
    """2 workers of 2 towers, replicated, to step 2: the chief's train_dir.

    Only the chief writes, one copy under the names of the tutorial's
    one-device trainer.
    """
    workers = make_cluster(
        2,
        "--variable_update=replicated",
        "--num_gpus=2",
        "--batch_size=4",
        "--max_steps=2",
        num_ps=0,
    )
    workers.start("worker", 0)
    workers.start("worker", 1)
    for name in ("worker0", "worker1"):
        code, _ = workers.wait(name)
        assert code == 0, workers.log(name)[-3000:]
    train_dir = workers.train_dir(0)
    assert not workers.train_dir(1).exists()
    assert checkpoint_steps(train_dir)[-1] == 2
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES
    return train_dir


def _resume_on_the_towers(data_dir, train_dir, pretrained):
    """From step 2: replicated on 4 towers to 4, parameter_server on 2 to
    6 (pretrained ignored: a train_dir with checkpoints resumes),
    replicated on 1 to 8."""
    four = _multi(
        data_dir,
        train_dir,
        4,
        "--variable_update=replicated",
        "--batch_size=1",
        "--max_steps=4",
    )
    assert "training from step 2" in four.stdout
    assert (
        "--variable_update=replicated: a copy of the variables on each "
        "tower, their gradients all-reduced by collective\n" in four.stdout
    )
    assert checkpoint_steps(train_dir)[-1] == 4
    two = _multi(
        data_dir,
        train_dir,
        2,
        "--variable_update=parameter_server",
        "--batch_size=2",
        "--max_steps=6",
        "--pretrained_model_checkpoint_path=%s" % pretrained,
    )
    assert "training from step 4" in two.stdout
    assert "all-reduced" not in two.stdout
    assert (
        "--pretrained_model_checkpoint_path=%s is ignored" % pretrained
        in two.stdout
    )
    assert checkpoint_steps(train_dir)[-1] == 6
    one_tower = _multi(
        data_dir,
        train_dir,
        1,
        "--variable_update=replicated",
        "--batch_size=2",
        "--max_steps=8",
    )
    assert "training from step 6" in one_tower.stdout
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES


@pytest.mark.slow
def test_a_checkpoint_goes_through_every_kind_of_run_to_the_eval(
    cifar10_data_dir, make_cluster, tmp_path
):
    train_dir = _train_workers_only(make_cluster)
    pretrained = shutil.copytree(train_dir, tmp_path / "pretrained")
    _resume_on_the_towers(cifar10_data_dir, train_dir, pretrained)
    one = _train(
        "cifar10_train.py",
        cifar10_data_dir,
        train_dir,
        "--batch_size=3",
        "--max_steps=10",
    )
    assert "training from step 8" in one.stdout
    assert checkpoint_steps(train_dir)[-1] == 10
    # The names of the tutorial's one-device trainer, so that its graph
    # restores the checkpoint.
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES
    restore_in_tutorial_graph(tf.train.latest_checkpoint(str(train_dir)))

    # A ps cluster with sync replicas, in the same train_dir (train0).
    cluster = make_cluster(
        2,
        "--sync_replicas",
        "--batch_size=2",
        "--max_steps=12",
        "--clip_gradients=5",
    )
    assert cluster.train_dir(0) == train_dir
    steps = run_to_the_end(cluster, 2)
    assert "training from step 10" in cluster.log("worker0")
    assert max(global_step for _, global_step in steps) == 12
    assert checkpoint_steps(train_dir)[-1] == 12
    assert _names(train_dir) == TUTORIAL_ONE_DEVICE_NAMES

    eval_once(cifar10_data_dir, train_dir, tmp_path / "eval")
    [precision] = read_events(tmp_path / "eval").Scalars("Precision @ 1")
    assert precision.step == 12


@pytest.mark.slow
def test_a_checkpoint_of_the_tutorials_multi_gpu_trainer_evaluates_and_resumes(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "tutorial"
    train_dir.mkdir()
    write_tutorial_multi_gpu_checkpoint(train_dir)
    eval_once(cifar10_data_dir, train_dir, tmp_path / "eval")
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
    saved = saved_values(tf.train.latest_checkpoint(str(train_dir)))
    assert saved["global_step"] == TUTORIAL_STEP + 2
    assert saved["global_step"].dtype == np.int64
    assert set(saved) == TUTORIAL_ONE_DEVICE_NAMES


def _assert_warm_started(source, started, fresh_layers=()):
    """Each weight and shadow of `started` is `source`'s, but fresh_layers'."""
    assert started["global_step"] == 0
    names = [
        each
        for name in TUTORIAL_WEIGHTS
        for each in (name, name + restore.SHADOW_SUFFIX)
    ]
    fresh = [name for name in names if name.split("/")[0] in fresh_layers]
    assert_values_kept(source, started, names, fresh)


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
        "Warm start from %s: restored 10 model variable(s), 0 of them not "
        "trainable (batch-norm statistics, frozen layers), and 10 moving "
        "average(s);" % source in result.stdout
    )
    # The saver writes the step the run starts at: the warm-started values.
    _assert_warm_started(
        saved_values(source), saved_values(tmp_path / "warm" / "model.ckpt-0")
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
        "Warm start left at their initial values: softmax_linear/biases, "
        "softmax_linear/weights (--fine_tune: the layer that makes the "
        "logits)" in result.stdout
    )
    tuned = saved_values(tmp_path / "tuned" / "model.ckpt-0")
    _assert_warm_started(saved_values(source), tuned, ["softmax_linear"])
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
    before = saved_values(source)
    after = saved_values(tmp_path / "tuned/model.ckpt-0")
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
    result = eval_once(
        cifar10_data_dir, train_dir, tmp_path / "eval", expect_success=False
    )
    assert result.returncode == 1
    # Its data.txt names MNIST: refused before the model is even read.
    assert _last_line(result) == (
        "cifar10_eval.py: error: --checkpoint_dir=%s was trained on MNIST, "
        "not on the CIFAR-10 sample set in --data_dir=%s (%s/data.txt names "
        "its files): its scores there would say nothing of it; pass the "
        "--data_dir it was trained on"
        % (train_dir, cifar10_data_dir, train_dir)
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
        "and 5 more; it seems to hold the CIFAR-10 tutorial's net "
        "(--model=tutorial)" % tf.train.latest_checkpoint(str(two_towers))
    )
    assert "Traceback" not in result.stderr
