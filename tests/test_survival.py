"""Nothing lost: the user's folders and progress survive ordinary accidents.

A copied or moved train_dir, an interrupt, a finished run started again,
--clear_train_dir on the user's files, a second trainer, --fake_data over
other data: each is provoked for real on the scripts, run as a user runs
them, and the test reads what is left (the bytes of the files that must
survive, the checkpoints, the exit code and the one line printed). Every
process a test starts is ended by pid and waited for by the test.
"""

import os
import re
import shutil
import signal
import socket
import time
import types

import pytest
import tensorflow as tf
from conftest import (
    BATCH_SIZE,
    CLIP_FLAG,
    checkpoint_steps,
    error_line,
    folder_contents,
    run_script,
    start_script,
    trainer_flags,
    write_cifar10_files,
)
from helpers.scripts import signal_when, wait_until

from data_sets import cifar10_data, mnist_data, sample_sets
from multigpu.distributed import cluster
from multigpu.run import interrupts, training
from multigpu.train_dir import checkpoints, lock, train_dirs

# Small batches, clipped so that they never diverge (see conftest).
CIFAR10_SMALL_STEPS = ("--batch_size=%d" % BATCH_SIZE, CLIP_FLAG)
# Seconds a started trainer has to reach what a test waits for, and an
# interrupted one to save and exit.
START_TIMEOUT_SECS = 120
EXIT_TIMEOUT_SECS = 60


def _train(data_dir, train_dir, *flags):
    """Runs cifar10_train.py (small batches, clipped) to the end."""
    return run_script(
        "cifar10_train.py", *trainer_flags(data_dir, train_dir, *flags)
    )


def test_a_moved_train_dir_lists_only_its_own_checkpoints(
    three_checkpoints, tmp_path_factory, capsys
):
    moved = tmp_path_factory.mktemp("moved") / "train"
    # A move: copied, then every file at the old place removed.
    shutil.copytree(str(three_checkpoints), str(moved))
    for name in os.listdir(str(three_checkpoints)):
        os.remove(str(three_checkpoints / name))
    state = checkpoints.checkpoint_state(str(moved))
    assert list(state.all_model_checkpoint_paths) == [
        str(moved / ("model.ckpt-%d" % step)) for step in (10, 20, 30)
    ]
    found = checkpoints.newest_valid_checkpoint(str(moved))
    assert found == str(moved / "model.ckpt-30")
    # No warning: the checkpoint the state file names is found in place.
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def finished_run(cifar10_data_dir, tmp_path_factory):
    """A train_dir trained to step 10, with checkpoints of steps 2 to 10.

    The tests that use it must leave it as it is (they check that).
    """
    train_dir = tmp_path_factory.mktemp("finished") / "train"
    _train(
        cifar10_data_dir,
        train_dir,
        "--max_steps=10",
        "--save_checkpoint_steps=2",
    )
    return train_dir


@pytest.mark.slow
def test_training_a_copied_train_dir_leaves_the_original_byte_identical(
    finished_run, cifar10_data_dir, tmp_path
):
    original, copy = finished_run, tmp_path / "copy"
    shutil.copytree(str(original), str(copy))
    before = folder_contents(original)
    # Three more saves in the copy: the saver (max_to_keep 5) prunes three.
    _train(
        cifar10_data_dir, copy, "--max_steps=14", "--save_checkpoint_steps=2"
    )
    assert folder_contents(original) == before
    assert checkpoint_steps(copy) == [6, 8, 10, 12, 14]
    state = tf.train.get_checkpoint_state(str(copy))
    assert os.path.dirname(state.model_checkpoint_path) == str(copy)
    assert not os.path.exists(str(copy / "model.ckpt-4.index"))


def _wait_until(process, log_path, ready):
    """Waits, while the process runs, until ready() holds."""
    wait_until(process, log_path, ready, START_TIMEOUT_SECS)


def _logged(log_path, pattern):
    """A function: whether the output holds a line matching pattern."""
    return lambda: re.search(pattern, log_path.read_text(), re.MULTILINE)


def _wait_for_output(process, log_path, pattern):
    """Waits, while the process runs, until its output matches pattern."""
    _wait_until(process, log_path, _logged(log_path, pattern))


def _interrupt(process, log_path, signum):
    """Sends signum once steps are logged; returns the exit code, output."""
    # The step logger's line of a step past the first save (step 0).
    stepped = _logged(log_path, r": step [0-9]+, loss")
    return signal_when(process, log_path, stepped, signum, START_TIMEOUT_SECS)


def _saved_global_step(checkpoint):
    return int(tf.train.load_checkpoint(checkpoint).get_tensor("global_step"))


# Long runs of each trainer, logging every third step.
CIFAR10_RUN = (
    "cifar10_train.py",
    ("--max_steps=100000", "--log_frequency=3", *CIFAR10_SMALL_STEPS),
)
MNIST_RUN = (
    "mnist_multi_gpu_train.py",
    (
        "--fake_data",
        "--cpu_towers",
        "--num_epochs=100",
        "--batch_size=8",
        "--log_frequency=3",
    ),
)
# The trainers stopped by a signal: (script, flags, signal, exit code).
INTERRUPTED_RUNS = {
    "cifar10_sigterm": (*CIFAR10_RUN, signal.SIGTERM, 143),
    # SIGHUP: a closed terminal; SIGQUIT: Ctrl-\.
    "cifar10_sighup": (*CIFAR10_RUN, signal.SIGHUP, 129),
    "mnist_sigquit": (*MNIST_RUN, signal.SIGQUIT, 131),
    "mnist_sigint": (*MNIST_RUN, signal.SIGINT, 130),
}


def test_after_a_first_signal_a_second_one_ends_the_process_at_once():
    hook = interrupts.InterruptHook()
    python_handler = signal.getsignal(signal.SIGINT)
    with hook.installed():
        assert signal.getsignal(signal.SIGINT) == hook.handle
        hook.handle(signal.SIGTERM, None)
        # The operating system's default: the second signal kills, even
        # while TensorFlow's C++ holds the main thread (a save).
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) == python_handler
    assert hook.exit_code() == 143


def test_a_signal_between_a_clusters_agreement_and_its_loop_is_held():
    received = []
    # The handler before the script's; the default would end the tests.
    before = signal.signal(signal.SIGTERM, lambda *args: received.append(1))
    try:
        interrupts.hold()
        hook = interrupts.InterruptHook()
        # The workers' agreement, under the run's handlers, then the time
        # until the training loop sets them again.
        with hook.installed(then_hold=True):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        with hook.installed():
            assert hook.signum == signal.SIGTERM
        assert received == []
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(INTERRUPTED_RUNS))
def test_an_interrupted_trainer_saves_its_step_and_says_so_in_one_line(
    run, cifar10_data_dir, tmp_path
):
    script, flags, signum, exit_code = INTERRUPTED_RUNS[run]
    data_dir = (
        cifar10_data_dir if script.startswith("cifar10") else tmp_path / "data"
    )
    train_dir, log_path = tmp_path / "train", tmp_path / "train.log"
    process = start_script(
        script,
        "--fake_data",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--save_checkpoint_steps=100000",
        *flags,
        log_path=log_path,
    )
    returncode, output = _interrupt(process, log_path, signum)
    assert returncode == exit_code, output[-3000:]
    last_line = output.strip().split("\n")[-1]
    found = re.fullmatch(
        r"%s: interrupted \(%s\) at step ([0-9]+); saved (\S+); run the "
        r"same command to resume" % (script, signal.Signals(signum).name),
        last_line,
    )
    assert found, output[-3000:]
    step, checkpoint = int(found.group(1)), found.group(2)
    assert step >= 3
    assert checkpoint == str(train_dir / ("model.ckpt-%d" % step))
    assert _saved_global_step(checkpoint) == step
    # The periodic saves never came: only the first step's and this one.
    assert checkpoint_steps(train_dir) == [0, step]
    assert "Traceback" not in output
    # Trained on the sample set, with or without --fake_data: said once.
    assert output.count("holds the built-in sample set") == 1


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_watching_eval_says_once_what_it_waits_for_and_a_signal_ends_it(
    signum, cifar10_data_dir, tmp_path
):
    log_path = tmp_path / "eval.log"
    train_dir = tmp_path / "train"
    evaluator = start_script(
        "cifar10_eval.py",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_interval_secs=1",
        log_path=log_path,
    )
    try:
        _wait_for_output(evaluator, log_path, r"waiting for a checkpoint in")
        # Three more looks for a checkpoint, and no more lines.
        time.sleep(3)
        os.kill(evaluator.pid, signum)
        evaluator.wait(timeout=EXIT_TIMEOUT_SECS)
    finally:
        evaluator.kill()
        evaluator.wait()
    output = log_path.read_text()
    assert evaluator.returncode == 128 + signum, output[-3000:]
    lines = output.strip().split("\n")
    assert [re.sub(r"^\S+ \S+: ", "DATE: ", line) for line in lines[-2:]] == [
        "DATE: waiting for a checkpoint in %s" % train_dir,
        "cifar10_eval.py: interrupted (%s); the eval saves nothing, its "
        "scores so far are in %s"
        % (signal.Signals(signum).name, train_dir / "eval"),
    ]
    assert output.count("waiting for a checkpoint") == 1


@pytest.mark.slow
def test_a_finished_run_started_again_trains_nothing_and_writes_nothing(
    finished_run, cifar10_data_dir
):
    before = folder_contents(finished_run)
    again = _train(cifar10_data_dir, finished_run, "--max_steps=3")
    assert folder_contents(finished_run) == before
    assert again.stdout.strip().split("\n")[-1] == (
        "%s is already at step 10, at or past --max_steps=3; nothing to "
        "train (raise --max_steps to train on)"
        % (finished_run / "model.ckpt-10")
    )


def _write_files(folder, files):
    """Writes files (name -> bytes) into folder, created if missing."""
    os.makedirs(str(folder), exist_ok=True)
    for name, content in files.items():
        with open(os.path.join(str(folder), name), "wb") as f:
            f.write(content)


# What a trainer writes in its train_dir (contents stand in for the real).
SUITE_FILES = {
    "checkpoint": b'model_checkpoint_path: "model.ckpt-5"\n',
    "model.ckpt-5.index": b"index",
    "model.ckpt-5.data-00000-of-00001": b"data",
    "model.ckpt-5.meta": b"meta",
    "events.out.tfevents.1700000000.host": b"events",
    "graph.pbtxt": b"graph",
    "model.txt": b"tutorial\n",
    "data.txt": b"the CIFAR-10 sample set\n",
}


def test_clearing_a_train_dir_deletes_only_what_the_trainers_write(tmp_path):
    _write_files(tmp_path, SUITE_FILES)
    os.makedirs(str(tmp_path / "model.ckpt-6_temp"))
    train_dirs.clear(str(tmp_path))
    assert os.listdir(str(tmp_path)) == []


def test_clearing_names_the_evals_folder_it_removes(tmp_path, capsys):
    _write_files(tmp_path, SUITE_FILES)
    _write_files(tmp_path / "eval", {"events.out.tfevents.1.host": b"e"})
    train_dirs.clear(str(tmp_path))
    assert capsys.readouterr().out == (
        "--clear_train_dir: removed 1 checkpoint(s), 1 event file(s), 4 "
        "other file(s) and the eval's folder eval/ (1 event file(s)) from "
        "%s\n" % tmp_path
    )
    assert os.listdir(str(tmp_path)) == []


def test_clearing_refuses_a_train_dir_that_is_the_data_folder(tmp_path):
    files = {**SUITE_FILES, "train.tfrecords": b"records"}
    _write_files(tmp_path / "data", files)
    with pytest.raises(ValueError) as error:
        train_dirs.clear(str(tmp_path / "data"), [str(tmp_path / "data")])
    assert str(error.value) == (
        "--clear_train_dir refused: --train_dir=%s is or contains the data "
        "folder %s; nothing was deleted"
        % (tmp_path / "data", tmp_path / "data")
    )
    # A train_dir holding the data folder is refused alike.
    with pytest.raises(ValueError, match="is or contains the data folder"):
        train_dirs.clear(str(tmp_path), [str(tmp_path / "data")])
    assert folder_contents(tmp_path / "data") == files


@pytest.mark.slow
def test_clear_train_dir_refuses_a_folder_with_other_files_and_names_them(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    files = {**SUITE_FILES, "notes.txt": b"my notes", "results.csv": b"1,2"}
    _write_files(train_dir, files)
    refused = error_line(
        "cifar10_train.py",
        *trainer_flags(
            cifar10_data_dir, train_dir, "--clear_train_dir", "--max_steps=1"
        ),
    )
    assert refused == (
        "cifar10_train.py: error: --clear_train_dir refused: %s holds 2 "
        "file(s) or folder(s) the trainers do not write (notes.txt, "
        "results.csv); move them away or choose another --train_dir; "
        "nothing was deleted" % train_dir
    )
    # Refused before its first step: the folder is as it was.
    assert folder_contents(train_dir) == files


@pytest.mark.slow
def test_a_second_trainer_is_refused_and_a_dead_ones_lock_taken_over(
    cifar10_data_dir, tmp_path
):
    train_dir, log_path = tmp_path / "train", tmp_path / "first.log"
    lock_path = train_dir / train_dirs.LOCK_NAME
    first = start_script(
        "cifar10_train.py",
        *trainer_flags(
            cifar10_data_dir,
            train_dir,
            "--max_steps=100000",
            "--save_checkpoint_steps=3",
        ),
        log_path=log_path,
    )
    host = socket.gethostname()
    try:
        _wait_until(
            first,
            log_path,
            lambda: (
                checkpoints.latest_checkpoint(str(train_dir))
                not in (None, str(train_dir / "model.ckpt-0"))
            ),
        )
        second = error_line(
            "cifar10_train.py",
            *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=1"),
        )
        assert second == (
            "cifar10_train.py: error: --train_dir=%s is in use by another "
            "trainer (pid %d on host %s, see %s); wait for it to end or stop "
            "it, or choose another --train_dir"
            % (train_dir, first.pid, host, lock_path)
        )
    finally:
        first.kill()  # As `kill -9`: the lock file still names it.
        first.wait()
    # Already past --max_steps=1: the third run takes the lock over, then
    # trains nothing.
    third = _train(cifar10_data_dir, train_dir, "--max_steps=1")
    # The kill may come mid-save, which leaves its model.ckpt-STEP_temp/.
    said = re.escape(
        "the last run in %s (pid %d on host %s) ended without a word, killed "
        "(kill -9, or the kernel out of memory?): it left its lock %s"
        % (train_dir, first.pid, host, lock_path)
    )
    tail = re.escape("; taking the lock over")
    assert re.search(
        r"^%s( and the unfinished write\(s\) \S+)?%s$" % (said, tail),
        third.stderr,
        re.MULTILINE,
    ), third.stderr
    assert "nothing to train" in third.stdout
    assert lock_path.read_bytes() == b""


@pytest.mark.slow
def test_fake_data_never_writes_over_a_data_set_with_a_missing_file(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=3)
    folder = tmp_path / "cifar-10-batches-bin"
    os.remove(str(folder / "data_batch_3.bin"))
    before = folder_contents(tmp_path)
    refused = error_line(
        "cifar10_train.py",
        "--fake_data",
        "--data_dir=%s" % tmp_path,
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert refused == (
        "cifar10_train.py: error: --fake_data refused: %s holds 5 file(s) "
        "that are not a sample set (data_batch_1.bin, data_batch_2.bin, "
        "data_batch_4.bin, data_batch_5.bin, test_batch.bin); the sample set "
        "is written only into an empty folder; pass another --data_dir" % folder
    )
    assert folder_contents(tmp_path) == before


@pytest.mark.slow
def test_mnist_fake_data_never_writes_over_other_files(tmp_path):
    files = {"train.tfrecords": b"real records", "notes.txt": b"mine"}
    _write_files(tmp_path, files)
    refused = error_line(
        "mnist_multi_gpu_train.py",
        "--fake_data",
        "--cpu_towers",
        "--data_dir=%s" % tmp_path,
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert refused == (
        "mnist_multi_gpu_train.py: error: --fake_data refused: %s holds 2 "
        "file(s) that are not a sample set (notes.txt, train.tfrecords); the "
        "sample set is written only into an empty folder; pass another "
        "--data_dir" % tmp_path
    )
    assert folder_contents(tmp_path) == files


def test_a_sample_set_written_before_markers_is_marked_not_refused(
    cifar10_data_dir, tmp_path, capsys
):

    cifar10 = tmp_path / "cifar10"
    shutil.copytree(
        str(cifar10_data_dir / "cifar-10-batches-bin"),
        str(cifar10 / "cifar-10-batches-bin"),
    )
    mnist_data.write_fake_data(str(tmp_path / "mnist"))
    os.remove(str(cifar10 / "cifar-10-batches-bin" / "SAMPLE_SET.txt"))
    os.remove(str(tmp_path / "mnist" / "SAMPLE_SET.txt"))
    before = folder_contents(tmp_path)
    assert not cifar10_data.write_fake_data(str(cifar10))
    assert not mnist_data.write_fake_data(str(tmp_path / "mnist"))
    marker = sample_sets.MARKER_TEXT.encode()
    assert folder_contents(tmp_path) == {
        **before,
        os.path.join("cifar10", "cifar-10-batches-bin", "SAMPLE_SET.txt"): (
            marker
        ),
        os.path.join("mnist", "SAMPLE_SET.txt"): marker,
    }
    assert capsys.readouterr().out == (
        "marking %s as a sample set (written unmarked)\n"
        "marking %s as a sample set (written unmarked)\n"
        % (cifar10 / "cifar-10-batches-bin", tmp_path / "mnist")
    )


def test_the_run_after_a_killed_one_says_it_ended_and_what_it_left(
    tmp_path, capsys
):
    # What a trainer killed mid-save leaves: its lock, its save's folder.
    (tmp_path / train_dirs.LOCK_NAME).write_text("4242 otherhost\n")
    unfinished = tmp_path / "model.ckpt-15_temp"
    unfinished.mkdir()
    (unfinished / "part-0-of-2.index").write_bytes(b"part")
    with lock.owned(str(tmp_path)):
        pass
    assert capsys.readouterr().err == (
        "the last run in %s (pid 4242 on host otherhost) ended without a "
        "word, killed (kill -9, or the kernel out of memory?): it left its "
        "lock %s and the unfinished write(s) model.ckpt-15_temp/; taking the "
        "lock over\n" % (tmp_path, tmp_path / train_dirs.LOCK_NAME)
    )


def _run_failing_before_step_1(train_dir, monkeypatch):
    """Runs `_run_or_put_back` in one process, its training stubbed: the
    run writes its first checkpoint's index, then fails."""

    def fails_before_step_1(*args):
        (train_dir / "model.ckpt-0.index").write_bytes(b"this run's")
        raise ValueError("a failed first step")

    monkeypatch.setattr(training, "_train", fails_before_step_1)
    session = training._Session(
        cluster.LOCAL_TASK, None, None, [], [], (), None
    )
    watched = types.SimpleNamespace(
        logger=types.SimpleNamespace(runs=0),
        interrupt=interrupts.InterruptHook(),
    )
    training._run_or_put_back(None, str(train_dir), session, None, watched)


def test_a_run_failing_before_step_1_keeps_what_the_trainer_before_it_saved(
    tmp_path, monkeypatch
):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    open_lock_file = lock._open_lock_file

    def saved_by_the_trainer_before(*args):
        # The trainer that held the lock saves and ends as this run starts.
        (train_dir / "model.ckpt-3.index").write_bytes(b"the trainer's")
        return open_lock_file(*args)

    monkeypatch.setattr(lock, "_open_lock_file", saved_by_the_trainer_before)
    with pytest.raises(ValueError, match="^a failed first step$"):
        _run_failing_before_step_1(train_dir, monkeypatch)
    assert folder_contents(train_dir) == {
        "model.ckpt-3.index": b"the trainer's"
    }


def test_a_run_refused_a_train_dir_in_use_removes_none_of_its_files(
    tmp_path, monkeypatch
):
    train_dir = tmp_path / "train"
    with lock.owned(str(train_dir)):
        saved = train_dir / "model.ckpt-3.index"
        saved.write_bytes(b"the trainer's")
        with pytest.raises(lock.InUse):
            _run_failing_before_step_1(train_dir, monkeypatch)
    assert saved.read_bytes() == b"the trainer's"
