"""cifar10_train.py and cifar10_eval.py end to end, and their bad input."""

import os
import socket

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    checkpoint_steps,
    eval_scores_in_numpy,
    read_events,
    run_script,
    training_error,
    write_cifar10_files,
)
from helpers.scripts import eval_once
from helpers.tutorial_checkpoints import write_infinite_checkpoint

import cifar10_input

MAX_STEPS = 200
BATCH_SIZE = 32
# Bad input must fail at once; a script still running after this hangs.
BAD_INPUT_TIMEOUT_SECS = 60
OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"


def _train(data_dir, train_dir, *flags, **kwargs):
    return run_script(
        "cifar10_train.py",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=%d" % BATCH_SIZE,
        *flags,
        **kwargs,
    )


def _error(run, *args):
    """Runs `_train` or `eval_once`, which must fail within seconds.

    Returns:
      str, the one-line error the script printed last on stderr.
    """
    result = run(*args, expect_success=False, timeout=BAD_INPUT_TIMEOUT_SECS)
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def trained(cifar10_data_dir, tmp_path_factory):
    """Trains MAX_STEPS steps on the sample set; returns the train_dir."""
    train_dir = tmp_path_factory.mktemp("cifar10_train")
    _train(
        cifar10_data_dir,
        train_dir,
        "--fake_data",
        "--max_steps=%d" % MAX_STEPS,
        "--log_frequency=50",
    )
    return train_dir


@pytest.fixture(scope="module")
def evaluated(trained, cifar10_data_dir, tmp_path_factory):
    """Scores the newest checkpoint of `trained`; returns the eval_dir."""
    eval_dir = tmp_path_factory.mktemp("cifar10_eval")
    eval_once(cifar10_data_dir, trained, eval_dir, "--num_examples=1000")
    return eval_dir


@pytest.mark.slow
def test_training_checkpoints_the_first_and_the_last_step(trained):
    assert checkpoint_steps(trained) == [0, MAX_STEPS]


@pytest.mark.slow
def test_training_lowers_the_loss(trained):
    events = read_events(trained)
    total_loss = events.Scalars("Loss/total_loss (raw)")
    # Summaries every 100 steps, from the first, and at the last.
    # The default for a run of 200 steps: every 10, so 21 points.
    assert [e.step for e in total_loss] == [
        *range(1, MAX_STEPS, 10),
        MAX_STEPS,
    ]
    # About 4.7 at first: 2.3 of cross-entropy plus 2.4 of weight decay.
    assert total_loss[0].value > 4.0
    assert total_loss[-1].value < total_loss[0].value - 1.0
    # Chance is ln(10) = 2.3; the sample classes are learnt within 100 steps.
    assert events.Scalars("Loss/cross_entropy (raw)")[-1].value < 1.0


@pytest.mark.slow
def test_train_events_hold_the_loss_learning_rate_and_histograms(trained):
    events = read_events(trained)
    tags = events.Tags()
    assert {
        "Loss/total_loss",
        "Loss/total_loss (raw)",
        "Loss/learning_rate",
    } <= set(tags["scalars"])
    learning_rate = events.Scalars("Loss/learning_rate")[0].value
    assert learning_rate == pytest.approx(0.1)
    for layer in ["conv1", "conv2", "local3", "local4", "softmax_linear"]:
        assert {
            layer + "/activations",
            layer + "/weights",
            layer + "/weights/gradients",
        } <= set(tags["histograms"])


@pytest.mark.slow
def test_eval_scores_the_last_checkpoint_far_above_chance(evaluated):
    [precision] = read_events(evaluated).Scalars("Precision @ 1")
    assert precision.step == MAX_STEPS
    # Chance is 0.1. Each sample class is one colour layout under pixel
    # noise; 200 steps of 32 examples classify nearly all test images
    # (measured: 1.0), so 0.8 leaves room and still fails a broken model.
    assert precision.value > 0.8
    # Recall @ 5 counts the label among the 5 highest logits: at least the
    # top-1 hits.
    [recall] = read_events(evaluated).Scalars("Recall @ 5")
    assert recall.step == MAX_STEPS
    assert precision.value <= recall.value <= 1.0


@pytest.mark.slow
def test_a_second_run_resumes_and_clear_train_dir_starts_over(
    cifar10_data_dir, tmp_path
):
    _train(cifar10_data_dir, tmp_path, "--fake_data", "--max_steps=20")
    resumed = _train(
        cifar10_data_dir, tmp_path, "--fake_data", "--max_steps=40"
    )
    assert "training from step 20\n" in resumed.stdout
    assert checkpoint_steps(tmp_path) == [0, 20, 40]

    cleared = _train(
        cifar10_data_dir,
        tmp_path,
        "--fake_data",
        "--max_steps=10",
        "--clear_train_dir",
    )
    # Steps 0, 20 and 40; an event file per run; the state file, the graph
    # and the records of the model and the data (the lock stays, held by
    # the run).
    assert (
        "--clear_train_dir: removed 3 checkpoint(s), 2 event file(s) and 4 "
        "other file(s) from %s\n" % tmp_path
    ) in cleared.stdout
    assert "training from step 0\n" in cleared.stdout
    assert checkpoint_steps(tmp_path) == [0, 10]


def _closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return "http://127.0.0.1:%d/cifar-10-binary.tar.gz" % port


def test_missing_files_without_a_download_say_what_to_fetch(tmp_path):
    url = _closed_port_url()
    error = _error(_train, tmp_path, tmp_path / "train", "--data_url=" + url)
    names = ", ".join(cifar10_input.TRAIN_FILES + cifar10_input.TEST_FILES)
    assert error.startswith(
        "cifar10_train.py: error: Could not download %s (" % url
    )
    assert error.endswith(
        "CIFAR-10 files missing in %s: %s. Download %s and extract it in %s, "
        "or pass --fake_data to use a generated sample set."
        % (tmp_path / "cifar-10-batches-bin", names, OFFICIAL_URL, tmp_path)
    )


def test_eval_without_the_test_file_names_it(tmp_path):
    error = _error(eval_once, tmp_path, tmp_path, tmp_path / "eval")
    assert error == (
        "cifar10_eval.py: error: CIFAR-10 files missing in %s: "
        "test_batch.bin. Download %s and extract it in %s, or pass "
        "--fake_data to use a generated sample set."
        % (tmp_path / "cifar-10-batches-bin", OFFICIAL_URL, tmp_path)
    )


def test_a_file_of_partial_records_is_an_error_naming_it(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=3)
    filename = tmp_path / "cifar-10-batches-bin" / "data_batch_4.bin"
    with open(filename, "ab") as f:
        f.write(b"\0" * 100)
    error = _error(_train, tmp_path, tmp_path / "train")
    assert error == (
        "cifar10_train.py: error: %s: size 9319 bytes is not a positive "
        "multiple of the record size 3073 (1 label byte + 3,072 image bytes)"
        % filename
    )


def test_a_label_outside_0_to_9_is_an_error_naming_file_and_record(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=3)
    filename = tmp_path / "cifar-10-batches-bin" / "data_batch_2.bin"
    records = np.fromfile(filename, np.uint8).reshape(3, 3073)
    records[2, 0] = 10
    records.tofile(filename)
    error = _error(_train, tmp_path, tmp_path / "train")
    assert error == (
        "cifar10_train.py: error: %s: record 2 has label 10, expected 0..9"
        % filename
    )


def test_eval_run_once_without_a_checkpoint_says_so(cifar10_data_dir, tmp_path):
    error = _error(eval_once, cifar10_data_dir, tmp_path, tmp_path / "eval")
    assert error == (
        "cifar10_eval.py: error: no checkpoint found in --checkpoint_dir=%s"
        % tmp_path
    )


@pytest.mark.slow
def test_the_eval_scores_are_numpys_counts_on_the_moving_averages_logits(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    # After 20 steps the moving averages score apart from the weights
    # themselves, both far from chance (0.1, 0.5) and from 1 (measured in two
    # runs: 0.59 and 0.80 against 0.44 and 0.86; 0.51 and 0.80 against 0.50
    # and 0.85).
    _train(cifar10_data_dir, train_dir, "--fake_data", "--max_steps=20")
    result = eval_once(
        cifar10_data_dir,
        train_dir,
        tmp_path / "eval",
        "--num_examples=100",
        "--batch_size=25",
    )
    precision, recall = eval_scores_in_numpy(
        str(train_dir / "model.ckpt-20"), cifar10_data_dir, "tutorial", 100, 25
    )
    assert [
        line.split(": ", 1)[1] for line in result.stdout.splitlines()[-2:]
    ] == ["precision @ 1 = %.3f" % precision, "recall @ 5 = %.3f" % recall]
    events = read_events(tmp_path / "eval")
    written = [
        [(e.step, e.value) for e in events.Scalars(tag)]
        for tag in ("Precision @ 1", "Recall @ 5")
    ]
    assert written == [
        [(20, np.float32(precision))],
        [(20, np.float32(recall))],
    ]


@pytest.mark.slow
def test_a_diverged_model_stops_training_and_keeps_the_last_checkpoint(
    cifar10_data_dir, tmp_path
):
    checkpoint = write_infinite_checkpoint(tmp_path, 50)
    # A checkpoint every step: the diverged step 51 must still not be saved.
    error = _error(
        _train,
        cifar10_data_dir,
        tmp_path,
        "--fake_data",
        "--max_steps=60",
        "--save_checkpoint_steps=1",
    )
    assert error.startswith(
        "cifar10_train.py: error: the model diverged at step 51 ("
    )
    assert error.endswith(
        "); stopped without saving it, the newest checkpoint is %s" % checkpoint
    )
    assert tf.train.latest_checkpoint(str(tmp_path)) == checkpoint
    weights = tf.train.load_checkpoint(checkpoint).get_tensor("local4/weights")
    assert np.isposinf(weights).all()


def test_a_nan_loss_on_a_checkpoint_step_is_not_saved(tmp_path, caplog):
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        # Finite for global steps 0, 1 and 2; NaN from step 3 on.
        loss = tf.sqrt(2.5 - tf.cast(global_step, tf.float32))
        with tf.control_dependencies([loss]):
            train_op = global_step.assign_add(1)
        error = training_error(
            train_op, loss, tmp_path, save_checkpoint_steps=1
        )
    newest = os.path.join(str(tmp_path), "model.ckpt-3")
    assert error == (
        "the model diverged at step 4 (loss is NaN); stopped without saving "
        "it, the newest checkpoint is %s" % newest
    )
    assert checkpoint_steps(tmp_path) == [0, 1, 2, 3]
    # The error above says it once: no ERROR line of TensorFlow's before.
    assert [
        r.getMessage() for r in caplog.records if r.levelname == "ERROR"
    ] == []
