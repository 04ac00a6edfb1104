"""Bad checkpoints: a truncated, deleted or unreadable newest one gives way.

The trainer, the eval and `checkpoints.newest_valid_checkpoint` pass over a
checkpoint that does not read whole to the one before it; none at all that
reads is an error, not a fresh start.
"""

import glob
import os

import pytest
from helpers.checkpoints import truncate_checkpoint

from multigpu import errors
from multigpu.train_dir import checkpoints


def test_a_truncated_newest_checkpoint_gives_way_to_the_one_before(
    three_checkpoints, capsys
):
    newest = str(three_checkpoints / "model.ckpt-30")
    truncate_checkpoint(newest)
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
        truncate_checkpoint(str(three_checkpoints / ("model.ckpt-%d" % step)))
    with pytest.raises(errors.TrainingError) as error:
        checkpoints.newest_valid_checkpoint(str(three_checkpoints))
    assert str(error.value) == (
        "none of the 3 checkpoint(s) in %s reads (the newest is %s): nothing "
        "to resume from or to score; put back whole copies, or move them out "
        "of the folder, and a trainer starts over from step 0"
        % (three_checkpoints, three_checkpoints / "model.ckpt-30")
    )


def test_a_folder_without_checkpoints_is_a_fresh_start(tmp_path, capsys):
    assert checkpoints.newest_valid_checkpoint(str(tmp_path)) is None
    assert checkpoints.newest_valid_checkpoint(str(tmp_path / "new")) is None
    assert capsys.readouterr().err == ""
