"""Bad checkpoints: a truncated, deleted or unreadable newest one gives way.

The trainer, the eval and `checkpoints.newest_valid_checkpoint` pass over a
checkpoint that does not read whole to the one before it; none at all that
reads is an error, not a fresh start.
"""

import glob
import os
import shutil

import pytest
import tensorflow as tf
from conftest import checkpoint_steps, read_events, run_script
from helpers.events import run_event_files, summary_steps
from helpers.training import SINGLE, run_trainer

from multigpu import errors
from multigpu.run import checkpoints


def _truncate(checkpoint):
    """Cuts the largest data file of a checkpoint to half its size."""
    data = max(glob.glob(checkpoint + ".data-*"), key=os.path.getsize)
    os.truncate(data, os.path.getsize(data) // 2)


def test_a_truncated_newest_checkpoint_gives_way_to_the_one_before(
    three_checkpoints, capsys
):
    newest = str(three_checkpoints / "model.ckpt-30")
    _truncate(newest)
    found = checkpoints.newest_valid_checkpoint(str(three_checkpoints))
    assert found == str(three_checkpoints / "model.ckpt-20")
    assert capsys.readouterr().err == (
        "WARNING: skipping checkpoint %s, it does not read (IndexError: Read "
        "less bytes than requested)\n" % newest
    )


def test_a_deleted_newest_checkpoint_still_named_gives_way_to_the_one_before(
    three_checkpoints, capsys
):
    newest = str(three_checkpoints / "model.ckpt-30")
    for path in glob.glob(newest + ".*"):
        os.remove(path)
    found = checkpoints.newest_valid_checkpoint(str(three_checkpoints))
    assert found == str(three_checkpoints / "model.ckpt-20")
    assert capsys.readouterr().err == (
        "WARNING: skipping checkpoint %s, it does not read (NotFoundError: "
        "Unsuccessful TensorSliceReader constructor: Failed to find any "
        "matching files for %s)\n" % (newest, newest)
    )


@pytest.mark.parametrize(
    "state",
    [b"", b"model_checkpoint_path: {{{", bytes(range(256))],
    ids=["empty", "unparsable", "binary"],
)
def test_a_garbage_state_file_gives_way_to_the_newest_checkpoint(
    three_checkpoints, capsys, state
):
    (three_checkpoints / "checkpoint").write_bytes(state)
    found = checkpoints.newest_valid_checkpoint(str(three_checkpoints))
    assert found == str(three_checkpoints / "model.ckpt-30")
    assert capsys.readouterr().err == (
        "WARNING: %s names no checkpoint; looking for the newest one\n"
        % (three_checkpoints / "checkpoint")
    )


def test_checkpoints_of_which_none_reads_are_an_error_not_a_fresh_start(
    three_checkpoints,
):
    for step in (10, 20, 30):
        _truncate(str(three_checkpoints / ("model.ckpt-%d" % step)))
    with pytest.raises(errors.TrainingError) as error:
        checkpoints.newest_valid_checkpoint(str(three_checkpoints))
    assert str(error.value) == (
        "none of the 3 checkpoint(s) in %s reads (the newest is %s); move "
        "them away to train from step 0"
        % (three_checkpoints, three_checkpoints / "model.ckpt-30")
    )


def test_a_folder_without_checkpoints_is_a_fresh_start(tmp_path, capsys):
    assert checkpoints.newest_valid_checkpoint(str(tmp_path)) is None
    assert checkpoints.newest_valid_checkpoint(str(tmp_path / "new")) is None
    assert capsys.readouterr().err == ""


def _copy_checkpoints(train_dir, copy_dir):
    """Copies the checkpoints of train_dir; the state file names the copies.

    Returns:
      list of int, the steps of the copies, oldest first.
    """
    os.makedirs(copy_dir)
    for path in glob.glob(os.path.join(str(train_dir), "model.ckpt-*")):
        shutil.copy(path, str(copy_dir))
    steps = checkpoint_steps(train_dir)
    names = ["model.ckpt-%d" % step for step in steps]
    tf.compat.v1.train.update_checkpoint_state(str(copy_dir), names[-1], names)
    return steps


@pytest.mark.slow
def test_trainer_and_eval_skip_a_truncated_newest_checkpoint(
    single_runs, cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    *_, before, newest = _copy_checkpoints(single_runs.train_dir, train_dir)
    _truncate(str(train_dir / ("model.ckpt-%d" % newest)))
    warning = (
        "WARNING: skipping checkpoint %s/model.ckpt-%d, it does not read"
        % (train_dir, newest)
    )

    evaluated = run_script(
        "cifar10_eval.py",
        "--run_once",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--num_examples=100",
    )
    assert warning in evaluated.stderr
    [precision] = read_events(tmp_path / "eval").Scalars("Precision @ 1")
    assert precision.step == before

    trained = run_trainer(
        SINGLE, cifar10_data_dir, train_dir, "--max_steps=%d" % (newest + 5)
    )
    # Named once, though the trainer checks for a finished run first.
    assert trained.stderr.count(warning) == 1
    [resumed] = run_event_files(train_dir)
    assert summary_steps(resumed)[0] == before + 1
    assert checkpoint_steps(train_dir)[-1] == newest + 5
