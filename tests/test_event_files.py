"""One writer per event file: every process's events read back in full.

TensorFlow names an event file by the second and the host it starts on, so
processes that started in the same second in one folder (a trainer and an
eval, two evals) wrote one file over each other. Each file now ends in its
process's id and a random token; a writer that finds other bytes in its
file, or cannot write its summary, stops with one line.
"""

import glob
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import (
    REPO,
    SCRIPT_ENV,
    error_line,
    run_script,
    trainer_flags,
    training_error,
)

from multigpu import errors
from multigpu.train_dir import event_files

# events.out.tfevents.SECONDS.HOST.PID.TOKEN
EVENT_FILE_NAME = (
    r"events\.out\.tfevents\.[0-9]+\.%s\.([0-9]+)\.[0-9a-f]{8}"
    % re.escape(socket.gethostname())
)


def _event_files(folder):
    return sorted(glob.glob(os.path.join(str(folder), "events.out.tfevents.*")))


def _scalars(path):
    """Every scalar of an event file: {(tag, step): value}.

    Raises DataLossError at a record that does not read in full.
    """
    return {
        (value.tag, event.step): value.simple_value
        for event in tf.compat.v1.train.summary_iterator(path)
        for value in event.summary.value
        if value.HasField("simple_value")
    }


def _scalar(tag, value):
    return tf.compat.v1.Summary(
        value=[tf.compat.v1.Summary.Value(tag=tag, simple_value=value)]
    )


def test_two_writers_opened_in_one_second_write_two_whole_files(tmp_path):
    tags = ("loss", "a tag of another length, so records do not line up")
    with tf.Graph().as_default():
        writers = [event_files.open_writer(str(tmp_path)) for _ in tags]
        for step in range(5):
            for writer, tag in zip(writers, tags):
                writer.add_summary(_scalar(tag, 2.5 * step), step)
                writer.flush()
        for writer in writers:
            writer.close()
    files = _event_files(tmp_path)
    assert len(files) == 2
    for path in files:
        found = re.fullmatch(EVENT_FILE_NAME, os.path.basename(path))
        assert found and int(found.group(1)) == os.getpid(), path
    found = sorted((sorted(_scalars(path).items()) for path in files))
    assert found == sorted(
        [((tag, step), 2.5 * step) for step in range(5)] for tag in tags
    )


# The first record of another writer of the run's file: TensorFlow's
# writer opens a file afresh (cut to 0 bytes) and writes this first.
FOREIGN_RECORD = tf.compat.v1.Event(
    wall_time=1.5, file_version="brain.Event:2"
).SerializeToString()


class _ForeignWriterHook(tf.compat.v1.train.SessionRunHook):
    """After the step of `at_run`, another writer opens the run's file."""

    def __init__(self, train_dir, at_run):
        self._train_dir = train_dir
        self._at_run = at_run
        self._runs = 0

    def after_run(self, run_context, run_values):
        self._runs += 1
        if self._runs == self._at_run:
            [path] = _event_files(self._train_dir)
            with tf.io.TFRecordWriter(path) as writer:
                writer.write(FOREIGN_RECORD)


def test_a_foreign_writer_of_the_event_file_stops_the_run_and_keeps_its_record(
    tmp_path,
):
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        loss = tf.cast(global_step, tf.float32) + 0.5
        tf.compat.v1.summary.scalar("loss", loss)
        with tf.control_dependencies([loss]):
            train_op = global_step.assign_add(1)
        error = training_error(
            train_op,
            loss,
            tmp_path,
            save_summaries_steps=1,
            hooks=[_ForeignWriterHook(str(tmp_path), at_run=2)],
        )
    [path] = _event_files(tmp_path)
    assert error == (
        "another process writes into the event file %s (its first record is "
        "another writer's); stopped at step 2, the newest complete checkpoint "
        "is %s" % (path, tmp_path / "model.ckpt-0")
    )
    # The other writer's record is left as it wrote it.
    with open(path, "rb") as f:
        head = f.read(len(FOREIGN_RECORD) + 16)
    assert head[12:-4] == FOREIGN_RECORD


@pytest.fixture(scope="module")
def source_run(cifar10_data_dir, tmp_path_factory):
    """A train_dir of 2 steps (checkpoint model.ckpt-2) to evaluate."""
    train_dir = tmp_path_factory.mktemp("source")
    run_script(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=2"),
    )
    return train_dir


def _start(script, *flags):
    return subprocess.Popen(
        [sys.executable, str(REPO / script), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=SCRIPT_ENV,
        cwd=REPO,
    )


def _finish(processes):
    """Waits for the processes; each must exit 0. Returns their stdout."""
    outputs = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr[-3000:]
            outputs.append(stdout)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    return outputs


def _eval_flags(data_dir, checkpoint_dir, eval_dir, *flags):
    return [
        "cifar10_eval.py",
        "--data_dir=%s" % data_dir,
        "--checkpoint_dir=%s" % checkpoint_dir,
        "--eval_dir=%s" % eval_dir,
        "--num_examples=8",
        "--batch_size=8",
        *flags,
    ]


def _file_of(process, files):
    """The event file of the process, by the process id in its name."""
    [path] = [
        each
        for each in files
        if re.fullmatch(EVENT_FILE_NAME, os.path.basename(each)).group(1)
        == str(process.pid)
    ]
    return path


def _printed(name, stdout):
    """The float the eval printed as 'DATE: NAME = 0.125'."""
    [value] = re.findall(r": %s = ([0-9.]+)$" % name, stdout, re.MULTILINE)
    return float(value)


@pytest.mark.slow
def test_a_trainer_and_an_eval_started_together_on_one_folder_keep_every_record(
    cifar10_data_dir, source_run, tmp_path
):
    shared = tmp_path / "shared"
    trainer = _start(
        *[
            "cifar10_train.py",
            *trainer_flags(cifar10_data_dir, shared, "--max_steps=2"),
            "--log_frequency=1",
        ]
    )
    evaluator = _start(
        *_eval_flags(cifar10_data_dir, source_run, shared, "--run_once")
    )
    trained, evaluated = _finish([trainer, evaluator])
    files = _event_files(shared)
    assert len(files) == 2
    scores = _scalars(_file_of(evaluator, files))
    # Eighths: the printed values are exact.
    assert scores[("Precision @ 1", 2)] == _printed("precision @ 1", evaluated)
    assert scores[("Recall @ 5", 2)] == _printed("recall @ 5", evaluated)
    losses = _scalars(_file_of(trainer, files))
    printed = dict(re.findall(r"step ([0-9]+), loss = ([0-9.]+)", trained))
    assert printed.keys() == {"1", "2"}
    for step in (1, 2):
        raw = losses[("Loss/total_loss (raw)", step)]
        assert "%.2f" % raw == printed[str(step)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "count, flags",
    [
        (3, ["--run_once"]),
        # Watching: each scores the checkpoint of step 2, its --last_step.
        (2, ["--last_step=2", "--eval_interval_secs=1"]),
    ],
)
def test_evals_started_together_on_one_eval_dir_keep_every_score(
    cifar10_data_dir, source_run, tmp_path, count, flags
):
    eval_dir = tmp_path / "eval"
    evaluators = [
        _start(*_eval_flags(cifar10_data_dir, source_run, eval_dir, *flags))
        for _ in range(count)
    ]
    outputs = _finish(evaluators)
    files = _event_files(eval_dir)
    assert len(files) == count
    for evaluator, stdout in zip(evaluators, outputs):
        scores = _scalars(_file_of(evaluator, files))
        assert {
            key: value for key, value in scores.items() if "@" in key[0]
        } == {
            ("Precision @ 1", 2): _printed("precision @ 1", stdout),
            ("Recall @ 5", 2): _printed("recall @ 5", stdout),
        }


@pytest.mark.slow
def test_an_eval_on_a_full_disk_is_one_line_and_leaves_no_file(
    cifar10_data_dir, source_run, small_disk
):
    from verification.data_files import fill_disk

    disk = small_disk("1m")
    fill_disk(disk)
    line = error_line(*_eval_flags(cifar10_data_dir, source_run, disk))
    assert re.fullmatch(
        r"cifar10_eval.py: error: could not write the event file %s/(%s) "
        r"\(No space left on device; 0\.0 MB free on its disk\); nothing is "
        r"left of it" % (re.escape(str(disk)), EVENT_FILE_NAME),
        line,
    ), line
    assert os.listdir(str(disk)) == ["filler"]


def test_steps_without_events_neither_flush_nor_read_yet_see_foreign_bytes(
    tmp_path, monkeypatch
):
    reads = []
    read_records = event_files._read_records
    monkeypatch.setattr(
        event_files,
        "_read_records",
        lambda path, start: reads.append(start) or read_records(path, start),
    )
    with tf.Graph().as_default():
        writer = event_files.open_writer(str(tmp_path))
        event_file = event_files.EventFile(writer)
        flushes = []
        flush = writer.flush
        writer.flush = lambda: flushes.append(writer.events_added) or flush()
        writer.add_summary(_scalar("loss", 1.0), 1)
        event_file.flush()
        # The file's version record and the summary.
        assert event_file.check() == 2
        # Steps that wrote no event: the file is looked at, not read.
        for _ in range(3):
            event_file.flush()
            assert event_file.check() == 0
        assert flushes == [1]
        assert reads == [0]
        with open(event_file.path, "ab") as f:
            f.write(b"not a record")
        with pytest.raises(event_files.ForeignWriter) as error:
            event_file.check()
        writer.close()
    assert reads == [0, event_file.end]
    assert str(error.value) == (
        "another process writes into the event file %s (the record at byte "
        "%d is another writer's: its checksum fails)"
        % (event_file.path, event_file.end)
    )


def test_an_evals_folder_deleted_while_it_watches_is_one_line(tmp_path):
    eval_dir = tmp_path / "eval"
    with tf.Graph().as_default():
        writer = event_files.open_writer(str(eval_dir))
        event_file = event_files.EventFile(writer)
        # A trainer's --clear_train_dir, between two checkpoints scored.
        shutil.rmtree(str(eval_dir))
        with pytest.raises(errors.TrainingError) as error:
            event_file.write_summary(tf.compat.v1.Summary(), 2)
    assert str(error.value) == (
        "could not write the summary of step 2 to the event file %s: its "
        "folder went away (deleted or moved, as a trainer's "
        "--clear_train_dir deletes it); run again to write a new one"
        % event_file.path
    )


@pytest.mark.slow
def test_an_eval_whose_summary_does_not_fit_is_one_line_and_keeps_whole_records(
    cifar10_data_dir, source_run, small_disk
):
    disk = small_disk("1m")
    # One 4 kB page free: room for the file's first record (its version, 40
    # bytes; the eval writes no graph), not for the scores and the model's
    # histograms after it (7.4 kB).
    with open(str(disk / "filler"), "wb") as f:
        f.write(bytes(1020 * 1024))
    line = error_line(*_eval_flags(cifar10_data_dir, source_run, disk))
    [path] = _event_files(disk)
    found = re.fullmatch(
        r"cifar10_eval.py: error: could not write the summary of step 2 to "
        r"the event file %s: a record was cut short while written \(was the "
        r"disk full\?\); 0\.0 MB free on its disk; the file keeps the "
        r"([0-9]+) bytes of events before" % re.escape(path),
        line,
    )
    assert found, line
    assert os.path.getsize(path) == int(found.group(1))
    # Every record reads in full; the scores are not among them.
    records = list(tf.compat.v1.train.summary_iterator(path))
    assert [record.file_version for record in records] == ["brain.Event:2"]
    assert _scalars(path) == {}


@pytest.mark.slow
def test_an_eval_on_a_read_only_folder_is_one_line_and_writes_nothing(
    cifar10_data_dir, source_run, small_disk
):
    disk = small_disk("1m")
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    line = error_line(*_eval_flags(cifar10_data_dir, source_run, disk))
    assert line == (
        "cifar10_eval.py: error: --eval_dir=%s is on a read-only file system; "
        "pass a folder this user can write" % disk
    )
    assert os.listdir(str(disk)) == []
