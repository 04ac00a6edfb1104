"""Nothing outside the suite's own files is read, deleted or written.

Paths are names, never patterns (a train_dir named 'run[1]' beside a
'run1'); a state file names nothing outside its folder; no file is written
through a link; --clear_train_dir deletes the suite's files only.
"""

import os
import re
import shutil
import subprocess

import pytest
import tensorflow as tf
from conftest import (
    checkpoint_steps,
    error_line,
    folder_contents,
    read_events,
    run_script,
    start_script,
    trainer_flags,
    wait_for_log,
)

from data_sets import cifar10_data, mnist_data
from multigpu.train_dir import checkpoints, lock, restore, train_dirs
from verification.data_files import fill_disk


def _write_files(folder, files):
    """Writes files (relative path -> bytes) under folder."""
    for name, content in files.items():
        path = os.path.join(str(folder), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)


# Checkpoint files of another run, which a pattern 'run[1]' would match.
NEIGHBOUR_FILES = {
    "model.ckpt-%d%s" % (step, suffix): b"the neighbour's step %d" % step
    for step in range(9)
    for suffix in (".index", ".meta", ".data-00000-of-00001")
}


def _evaluate_once(data_dir, checkpoint_dir, eval_dir):
    """Runs the eval on checkpoint_dir's newest checkpoint, 8 examples."""
    return run_script(
        "cifar10_eval.py",
        "--data_dir=%s" % data_dir,
        "--checkpoint_dir=%s" % checkpoint_dir,
        "--eval_dir=%s" % eval_dir,
        "--run_once",
        "--num_examples=8",
        "--batch_size=8",
    )


@pytest.mark.slow
def test_a_train_dir_named_as_a_pattern_reads_and_prunes_only_its_own_files(
    cifar10_data_dir, tmp_path
):
    neighbour, train_dir = tmp_path / "run1", tmp_path / "run[1]"
    _write_files(neighbour, NEIGHBOUR_FILES)
    # Links where the trainer writes its graph and its state file.
    train_dir.mkdir()
    for name in ("graph.pbtxt", "checkpoint"):
        os.symlink(str(neighbour / "model.ckpt-0.meta"), str(train_dir / name))
    flags = trainer_flags(cifar10_data_dir, train_dir, "--max_steps=6")
    run_script("cifar10_train.py", *flags, "--save_checkpoint_steps=1")
    assert checkpoint_steps(train_dir) == [2, 3, 4, 5, 6]
    assert not os.path.islink(str(train_dir / "graph.pbtxt"))
    # A state file that lists '*' and a checkpoint of another folder.
    state = (train_dir / "checkpoint").read_text()
    (train_dir / "checkpoint").write_text(
        state
        + 'all_model_checkpoint_paths: "*"\n'
        + 'all_model_checkpoint_paths: "%s"\n' % (neighbour / "model.ckpt-1")
    )
    resumed = run_script(
        "cifar10_train.py",
        *flags,
        "--max_steps=8",
        "--save_checkpoint_steps=1",
    )
    assert "training from step 6" in resumed.stdout
    assert "skipping checkpoint" not in resumed.stderr
    assert sorted(
        name for name in os.listdir(str(train_dir)) if name.endswith(".index")
    ) == ["model.ckpt-%d.index" % step for step in (4, 5, 6, 7, 8)]
    # A checkpoint named without -STEP, in a folder whose name holds a '-'
    # and a pattern.
    renamed = tmp_path / "best-run[2]"
    renamed.mkdir()
    for name in os.listdir(str(train_dir)):
        if name.startswith("model.ckpt-8."):
            shutil.copy(
                str(train_dir / name),
                str(renamed / name.replace("model.ckpt-8", "model.ckpt")),
            )
    (renamed / "checkpoint").write_text('model_checkpoint_path: "model.ckpt"\n')
    scored = _evaluate_once(cifar10_data_dir, renamed, tmp_path / "eval[1]")
    assert "evaluating %s" % (renamed / "model.ckpt") in scored.stdout
    [precision] = read_events(tmp_path / "eval[1]").Scalars("Precision @ 1")
    assert precision.step == 8
    assert folder_contents(neighbour) == NEIGHBOUR_FILES


def test_a_pretrained_folder_named_as_a_pattern_gives_its_own_checkpoint(
    tmp_path_factory,
):
    root = tmp_path_factory.mktemp("pretrained")
    folder = root / "run[1]"
    _save_counter(folder, 7.0)
    _save_counter(root / "run1", 1.0)
    checkpoint = restore.pretrained_checkpoint(str(folder))
    assert checkpoint == str(folder / "model.ckpt-3")
    with checkpoints.reading(checkpoint) as reader:
        assert reader.get_tensor("counter") == 7.0


def test_a_truncated_pretrained_checkpoint_is_one_line(tmp_path):
    _save_counter(tmp_path, 7.0)
    prefix = str(tmp_path / "model.ckpt-3")
    os.truncate(prefix + ".data-00000-of-00001", 2)
    with pytest.raises(ValueError) as error:
        restore.pretrained_checkpoint(prefix)
    assert str(error.value) == (
        "--pretrained_model_checkpoint_path=%s does not read in full "
        "(IndexError: Read less bytes than requested); pass a complete "
        "checkpoint" % prefix
    )


def _save_counter(folder, value):
    """Saves a checkpoint of step 3 holding 'counter' = value in folder."""
    with tf.Graph().as_default():
        counter = tf.compat.v1.get_variable("counter", initializer=value)
        saver = tf.compat.v1.train.Saver([counter])
        with tf.compat.v1.Session() as sess:
            sess.run(counter.initializer)
            saver.save(sess, str(folder / "model.ckpt"), 3)


def test_pruning_deletes_the_exact_files_of_the_checkpoint_only(tmp_path):
    kept = {
        "model.ckpt-1.index.txt": b"notes",
        "model.ckpt-10.index": b"10",
        "model.ckpt-1.data-00000-of-00001.bak": b"backup",
        "model.ckpt-1.meta/inside": b"a folder of that name",
    }
    _write_files(tmp_path, kept)
    _write_files(
        tmp_path,
        {
            "model.ckpt-1.index": b"1",
            "model.ckpt-1.meta.x": b"kept too",
            "model.ckpt-1.data-00000-of-00002": b"a",
            "model.ckpt-1.data-00001-of-00002": b"b",
        },
    )
    checkpoints.remove_checkpoint(str(tmp_path / "model.ckpt-1"))
    checkpoints.remove_checkpoint(str(tmp_path / "*"))
    checkpoints.remove_checkpoint(str(tmp_path / "model.ckpt-?0"))
    assert folder_contents(tmp_path) == {
        **kept,
        "model.ckpt-1.meta.x": b"kept too",
    }


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(
    tmp_path,
):
    target = tmp_path / "outside.txt"
    target.write_bytes(b"the user's file")
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    os.symlink(str(target), str(train_dir / train_dirs.LOCK_NAME))
    with pytest.raises(ValueError) as error:
        with lock.owned(str(train_dir)):
            pass
    assert str(error.value) == (
        "--train_dir=%s cannot be used: %s is a link (to %s), and the "
        "trainers write through no link; remove the link"
        % (train_dir, train_dir / train_dirs.LOCK_NAME, target)
    )
    assert target.read_bytes() == b"the user's file"


def test_a_train_dir_too_long_for_the_files_in_it_is_one_line(tmp_path):
    train_dir = tmp_path.joinpath(*["d" * 250] * 16)
    with pytest.raises(ValueError) as error:
        with lock.owned(str(train_dir)):
            pass
    assert str(error.value) == (
        "--train_dir is %d characters long (as an absolute path); the files "
        "the trainers write in it need up to 100 more, past this system's "
        "limit of 4096 for a path; choose a shorter --train_dir"
        % len(str(train_dir))
    )


@pytest.mark.parametrize(
    "record, read, of",
    [
        (train_dirs.MODEL_RECORD, train_dirs.recorded_model, "model"),
        (train_dirs.DATA_RECORD, train_dirs.recorded_data, "data"),
    ],
)
def test_a_record_that_is_a_folder_is_refused_in_one_line_naming_it(
    tmp_path, record, read, of
):
    (tmp_path / record).mkdir()
    with pytest.raises(ValueError) as error:
        read(str(tmp_path))
    assert str(error.value) == (
        "%s is a folder, where the trainers keep their record of the %s of "
        "%s; move it away" % (tmp_path / record, of, tmp_path)
    )


def test_a_train_dir_name_too_long_for_the_file_system_is_one_line(tmp_path):
    train_dir = tmp_path / ("x" * 300)
    with pytest.raises(ValueError) as error:
        train_dirs.recorded_model(str(train_dir))
    assert str(error.value) == "%s cannot be read: File name too long" % (
        train_dir / train_dirs.MODEL_RECORD
    )


def test_a_lock_file_of_other_content_is_refused_and_left_as_it_is(tmp_path):
    lock_file = tmp_path / train_dirs.LOCK_NAME
    lock_file.write_bytes(b"my own notes\n")
    with pytest.raises(ValueError) as error:
        with lock.owned(str(tmp_path)):
            pass
    assert str(error.value) == (
        "--train_dir=%s cannot be used: %s holds 13 byte(s) the trainers do "
        "not write (expected 'PID HOST' or nothing); move it away"
        % (tmp_path, lock_file)
    )
    assert lock_file.read_bytes() == b"my own notes\n"


# The user's folders, named like what the suite writes.
USERS_FOLDERS = {
    "checkpoint/best_model.h5": b"weights",
    "events.out.tfevents.mybackup/events": b"old events",
    "model.ckpt-1_temp/notes.txt": b"notes",
}


def test_clear_train_dir_refuses_the_users_folders_and_deletes_nothing(
    tmp_path,
):
    files = {**USERS_FOLDERS, "model.ckpt-5.index": b"index"}
    _write_files(tmp_path, files)
    os.symlink(
        str(tmp_path / "model.ckpt-5.index"), str(tmp_path / "graph.pbtxt")
    )
    with pytest.raises(ValueError) as error:
        train_dirs.clear(str(tmp_path))
    assert str(error.value) == (
        "--clear_train_dir refused: %s holds 4 file(s) or folder(s) the "
        "trainers do not write (checkpoint/, events.out.tfevents.mybackup/, "
        "graph.pbtxt, model.ckpt-1_temp/); move them away or choose another "
        "--train_dir; nothing was deleted" % tmp_path
    )
    assert folder_contents(tmp_path) == {**files, "graph.pbtxt": b"index"}


def test_clear_train_dir_deletes_traces_and_the_leftovers_of_broken_writes(
    tmp_path,
):
    hex_id = "0123456789abcdef" * 2
    _write_files(
        tmp_path,
        {
            "trace_step_3.json": b"{}",
            "graph.pbtxt.tmp" + hex_id: b"half a graph",
            "checkpoint.tmp" + hex_id: b"half a state",
            "model.ckpt-0.meta.tmp" + hex_id: b"half a meta",
            "model.ckpt-0.data-00000-of-00001.tempstate123": b"half data",
            "model.ckpt-7_temp/part-00000-of-00002.index": b"part",
            "model.ckpt-7_temp/part-00001-of-00002.data-00000-of-00001"
            ".tempstate99": b"part",
        },
    )
    train_dirs.clear(str(tmp_path))
    assert os.listdir(str(tmp_path)) == []


# The run's line, whichever write of the event file failed first.
DISK_FULL_LINE = (
    r"cifar10_train.py: error: could not write the event file (\S+) "
    r"\((No space left on device|a record was cut short while written \(was "
    r"the disk full\?\)); [0-9.]+ MB free on its disk\); it keeps every "
    r"event written before; stopped at step [0-9]+, the newest complete "
    r"checkpoint is (\S+)"
)


@pytest.mark.slow
def test_a_nearly_full_disk_at_start_is_one_line_and_leaves_no_file(
    cifar10_data_dir, small_disk
):
    # Room for neither the graph's event (835 kB) nor graph.pbtxt (680 kB).
    train_dir = small_disk("512k") / "train"
    line = error_line(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=1"),
    )
    assert re.fullmatch(
        r"cifar10_train.py: error: could not write %s \(ResourceExhausted"
        r"Error: No space left on device; [0-9.]+ MB free on its disk\); no "
        r"checkpoint is complete yet: a run started once the cause is fixed "
        r"starts from step 0" % re.escape(str(train_dir / "graph.pbtxt")),
        line,
    ), line
    # It failed before its first step: the folder it made is gone.
    assert not train_dir.exists()


@pytest.mark.slow
def test_a_disk_that_fills_stops_the_run_with_one_line_and_readable_events(
    cifar10_data_dir, small_disk, tmp_path
):
    disk = small_disk("20m")
    train_dir, log_path = disk / "train", tmp_path / "train.log"
    trainer = start_script(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=100000"),
        "--save_checkpoint_steps=100000",
        "--log_frequency=10",
        log_path=log_path,
    )
    try:
        wait_for_log(trainer, log_path, "step 10, loss", 120)
        filler = fill_disk(disk)
        trainer.wait(timeout=120)
    finally:
        trainer.kill()
        trainer.wait()
    filler.unlink()  # The disk frees again.
    log = log_path.read_text()
    assert trainer.returncode == 1, log[-3000:]
    assert "Traceback" not in log
    found = re.fullmatch(DISK_FULL_LINE, log.strip().split("\n")[-1])
    assert found, log[-3000:]
    assert found.group(3) == str(train_dir / "model.ckpt-0")
    # Every record reads (a cut one raises DataLossError), and TensorBoard
    # shows the loss of the steps before the disk filled.
    records = list(tf.compat.v1.train.summary_iterator(found.group(1)))
    assert records[0].file_version == "brain.Event:2"
    assert read_events(train_dir).Scalars("Loss/total_loss (raw)")[0].step == 1


def test_the_eval_refuses_a_checkpoint_dir_that_is_a_file(tmp_path):
    (tmp_path / "model.ckpt-5").write_bytes(b"")
    line = error_line(
        "cifar10_eval.py",
        "--checkpoint_dir=%s" % (tmp_path / "model.ckpt-5"),
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--data_dir=%s" % tmp_path,
    )
    assert line == (
        "cifar10_eval.py: error: --checkpoint_dir=%s is a file, not a folder; "
        "pass the folder of the checkpoints, the trainer's --train_dir"
        % (tmp_path / "model.ckpt-5")
    )


def test_a_disk_that_fills_while_a_sample_set_is_written_leaves_no_part(
    small_disk,
):
    disk = small_disk("300k")
    for write_fake_data, data_dir, folder in [
        (cifar10_data.write_fake_data, disk / "c", "c/cifar-10-batches-bin"),
        (mnist_data.write_fake_data, disk / "m", "m"),
    ]:
        with pytest.raises(ValueError) as error:
            write_fake_data(str(data_dir))
        assert re.fullmatch(
            r"could not write %s/\w+\.\w+ \(No space left on device; [0-9.]+ "
            r"MB free on its disk\); nothing half-written is left"
            % re.escape(str(disk / folder)),
            str(error.value),
        ), str(error.value)
        assert os.listdir(str(disk / folder)) == ["SAMPLE_SET.txt"]


def test_a_sample_set_on_a_read_only_disk_is_read_not_written(small_disk):
    disk = small_disk("64m")
    cifar10_data.write_fake_data(str(disk))
    before = folder_contents(disk)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    # As the eval's --fake_data and the trainers with it; without it the
    # trainers refuse the sample set, writing nothing.
    cifar10_data.write_fake_data(str(disk))
    cifar10_data.prepare_data_dir(str(disk), fake_data=True)
    with pytest.raises(ValueError, match="holds the built-in sample set"):
        cifar10_data.prepare_data_dir(str(disk), fake_data=False)
    assert folder_contents(disk) == before


def test_a_save_where_a_link_has_a_checkpoints_name_is_refused(tmp_path):
    target = tmp_path / "outside.txt"
    target.write_bytes(b"the user's file")
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    link = train_dir / "model.ckpt-1.meta"
    os.symlink(str(target), str(link))
    checkpoints.refuse_links(str(train_dir), 10)
    with pytest.raises(ValueError) as error:
        checkpoints.refuse_links(str(train_dir), 1)
    assert str(error.value) == (
        "cannot save the checkpoint of step 1: %s is a link (to %s), and the "
        "trainers write through no link; remove it" % (link, target)
    )
    assert target.read_bytes() == b"the user's file"
