"""What a long run survives: kills, bad checkpoints, a full disk, NaN, time.

Each test provokes the fault for real on the scripts, run as a user runs
them, and reads what is left: checkpoints, event files, exit codes. Every
process a test starts is killed and waited for by the test.
"""

import collections
import glob
import random
import re
import statistics
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    WATCHED_MAX_STEPS,
    checkpoint_steps,
    read_events,
    run_script,
    start_script,
    trainer_flags,
)
from helpers.checkpoints import copy_checkpoints, truncate_checkpoint
from helpers.events import run_event_files, summary_steps
from helpers.training import MULTI, SINGLE, run_trainer

from multigpu.train_dir import checkpoints

MAX_STEPS = 200
SAVE_STEPS = 25
# Seconds a started trainer has to reach what a test waits for.
START_TIMEOUT_SECS = 120
# TensorFlow's default number of checkpoints kept (Saver max_to_keep).
MAX_TO_KEEP = 5
# Five kills on each of two folders, each at a random point of a save; each
# kill costs a restart, TensorFlow's start-up, nearly the test's whole time.
KILLS = 10


def _start(trainer, data_dir, train_dir, *flags):
    script, *script_flags = trainer
    return start_script(
        script,
        *script_flags,
        *trainer_flags(data_dir, train_dir, *flags),
        log_path="%s.log" % train_dir,
    )


def _wait_for(process, ready, timeout=START_TIMEOUT_SECS):
    """Waits, while the process runs, until ready() holds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, "exited (%d)" % process.returncode
        assert time.monotonic() < deadline, "not ready in %d s" % timeout
        time.sleep(0.01)


def _kill(*processes):
    """Kills (SIGKILL, as `kill -9`) and waits for each process."""
    for process in processes:
        process.kill()
        process.wait()


def _kill_when(process, ready):
    """Kills the process as soon as ready() holds (or the wait fails)."""
    try:
        _wait_for(process, ready)
    finally:
        _kill(process)


def _newest_step(train_dir):
    """The step of the checkpoint the state file names; -1 without one."""
    checkpoint = tf.train.latest_checkpoint(str(train_dir))
    return int(checkpoint.rsplit("-", 1)[1]) if checkpoint else -1


KilledRuns = collections.namedtuple(
    "KilledRuns", "train_dir saved_before_first_kill saved_before_kill"
)


def _kill_mid_run_and_resume(trainer, data_dir, train_dir):
    """Kills a run after two saves, then runs again to MAX_STEPS.

    Returns:
      int, the newest saved step when it was killed.
    """
    flags = (
        "--max_steps=%d" % MAX_STEPS,
        "--save_checkpoint_steps=%d" % SAVE_STEPS,
    )
    _kill_when(
        _start(trainer, data_dir, train_dir, *flags),
        lambda: _newest_step(train_dir) >= 2 * SAVE_STEPS,
    )
    saved = _newest_step(train_dir)
    run_trainer(trainer, data_dir, train_dir, *flags)
    return saved


@pytest.fixture(scope="module")
def single_runs(cifar10_data_dir, tmp_path_factory):
    """One device: killed before its first save, killed mid-run, finished."""
    train_dir = tmp_path_factory.mktemp("killed") / "train"
    _kill_when(
        _start(SINGLE, cifar10_data_dir, train_dir),
        lambda: run_event_files(train_dir),
    )
    saved_before_first_kill = _newest_step(train_dir)
    return KilledRuns(
        train_dir,
        saved_before_first_kill,
        _kill_mid_run_and_resume(SINGLE, cifar10_data_dir, train_dir),
    )


@pytest.fixture(scope="module")
def multi_runs(cifar10_data_dir, tmp_path_factory):
    """Two towers: killed mid-run, then finished."""
    train_dir = tmp_path_factory.mktemp("killed_multi") / "train"
    saved = _kill_mid_run_and_resume(MULTI, cifar10_data_dir, train_dir)
    return KilledRuns(train_dir, None, saved)


@pytest.mark.slow
def test_a_trainer_killed_before_its_first_save_starts_again_at_step_0(
    single_runs,
):
    assert single_runs.saved_before_first_kill == -1
    killed, restarted, _ = run_event_files(single_runs.train_dir)
    assert summary_steps(killed) == []
    # A run's first summary is of its first step: global step 0 + 1.
    assert summary_steps(restarted)[0] == 1


@pytest.mark.slow
@pytest.mark.parametrize("runs", ["single_runs", "multi_runs"])
def test_a_trainer_killed_mid_run_resumes_from_its_newest_checkpoint(
    runs, request
):
    runs = request.getfixturevalue(runs)
    assert runs.saved_before_kill >= 2 * SAVE_STEPS
    *_, killed, resumed = run_event_files(runs.train_dir)
    # The killed run's file reads (its last summaries may not be flushed).
    assert all(step <= MAX_STEPS for step in summary_steps(killed))
    assert summary_steps(resumed)[0] == runs.saved_before_kill + 1
    assert checkpoint_steps(runs.train_dir)[-1] == MAX_STEPS


@pytest.mark.slow
def test_ten_kills_during_saves_leave_the_named_checkpoint_whole(
    cifar10_data_dir, tmp_path
):
    # A save every step, most of a step's time: the kills land in saves.
    # Two trainers on two folders, killed in turn, use both cores.
    rng = random.Random(7)
    folders = [tmp_path / "a", tmp_path / "b"]
    newest = {folder: -1 for folder in folders}
    for _ in range(KILLS // len(folders)):
        trainers = [
            _start(
                SINGLE,
                cifar10_data_dir,
                folder,
                "--max_steps=1000000",
                "--save_checkpoint_steps=1",
            )
            for folder in folders
        ]
        try:
            for folder, trainer in zip(folders, trainers):
                # Once this run has saved a step of its own, within 0.5 s.
                _wait_for(trainer, lambda f=folder: _newest_step(f) > newest[f])
                time.sleep(rng.uniform(0, 0.5))
                _kill(trainer)
        finally:
            _kill(*trainers)
        for folder in folders:
            checkpoint = tf.train.latest_checkpoint(str(folder))
            # TensorFlow's own choice reads in full: no fallback needed.
            assert (
                checkpoints.newest_valid_checkpoint(str(folder)) == checkpoint
            )
            # Each run resumed from the one before, none from step 0.
            assert _newest_step(folder) > newest[folder]
            newest[folder] = _newest_step(folder)


@pytest.mark.slow
def test_a_full_disk_stops_training_with_a_message_and_resume_works_later(
    cifar10_data_dir, small_disk
):
    # Three checkpoints fit, the fourth does not.
    disk = small_disk("30M")
    train_dir = disk / "train"
    flags = ("--max_steps=%d" % MAX_STEPS, "--save_checkpoint_steps=50")
    full = run_trainer(
        SINGLE, cifar10_data_dir, train_dir, *flags, expect_success=False
    )
    newest = _newest_step(train_dir)
    assert full.returncode == 1
    assert "Traceback" not in full.stderr
    assert re.fullmatch(
        r"cifar10_train.py: error: could not write the checkpoint of step %d "
        r"to %s \(ResourceExhaustedError: No space left on device; [0-9.]+ MB "
        r"free on its disk\); the newest complete checkpoint is "
        r"%s/model.ckpt-%d, and a run started once the cause is fixed "
        r"resumes from it"
        % (
            newest + 50,
            re.escape(str(train_dir)),
            re.escape(str(train_dir)),
            newest,
        ),
        full.stderr.strip().splitlines()[-1],
    ), full.stderr[-3000:]
    assert newest >= 50
    checkpoint = tf.train.latest_checkpoint(str(train_dir))
    assert checkpoints.newest_valid_checkpoint(str(train_dir)) == checkpoint
    # The partial files of the failed save are gone.
    assert glob.glob(str(train_dir / "*_temp")) == []

    subprocess.run(["mount", "-o", "remount,size=200M", str(disk)], check=True)
    run_trainer(SINGLE, cifar10_data_dir, train_dir, *flags)
    *_, resumed = run_event_files(train_dir)
    assert summary_steps(resumed)[0] == newest + 1
    assert checkpoint_steps(train_dir)[-1] == MAX_STEPS


def _write_infinite_copy(checkpoint, train_dir):
    """Saves the checkpoint's variables in train_dir, every float infinite.

    Returns:
      str, the path of the copy, at the same step.
    """
    reader = tf.train.load_checkpoint(checkpoint)
    step = int(checkpoint.rsplit("-", 1)[1])
    with tf.Graph().as_default():
        variables = {}
        for name, dtype in reader.get_variable_to_dtype_map().items():
            value = reader.get_tensor(name)
            if dtype.is_floating:
                value = np.full_like(value, np.inf)
            variables[name] = tf.compat.v1.Variable(value)
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return saver.save(sess, str(train_dir / "model.ckpt"), step)


@pytest.mark.slow
def test_a_diverged_multi_tower_model_stops_with_a_message(
    multi_runs, cifar10_data_dir, tmp_path
):
    checkpoint = _write_infinite_copy(
        tf.train.latest_checkpoint(str(multi_runs.train_dir)), tmp_path
    )
    diverged = run_trainer(
        MULTI,
        cifar10_data_dir,
        tmp_path,
        "--max_steps=%d" % (MAX_STEPS + 10),
        expect_success=False,
    )
    assert diverged.returncode == 1
    error = diverged.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "cifar10_multi_gpu_train.py: error: the model diverged at step %d ("
        % (MAX_STEPS + 1)
    )
    assert error.endswith(
        "); stopped without saving it, the newest checkpoint is %s" % checkpoint
    )
    assert tf.train.latest_checkpoint(str(tmp_path)) == checkpoint


def _evaluated_checkpoints(eval_log):
    """The steps of the checkpoints the eval printed it was scoring."""
    return [
        int(step) for step in re.findall(r": evaluating \S+-(\d+)\n", eval_log)
    ]


@pytest.mark.slow
def test_an_eval_beside_training_scores_only_whole_checkpoints(
    watched_training,
):
    assert watched_training.eval_returncode == 0, watched_training.eval_log
    scored = _evaluated_checkpoints(watched_training.eval_log)
    precision = read_events(watched_training.eval_dir).Scalars("Precision @ 1")
    # One summary per checkpoint scored, at its step, the last one included.
    assert [p.step for p in precision] == scored
    assert scored == sorted(set(scored))
    assert len(scored) >= 2
    assert scored[-1] == WATCHED_MAX_STEPS
    # A checkpoint deleted under the eval is skipped, never scored.
    skipped = re.findall(
        r"WARNING: skipping checkpoint \S+-(\d+)", watched_training.eval_log
    )
    assert not set(map(int, skipped)) & set(scored)
    assert checkpoint_steps(watched_training.train_dir) == list(
        range(WATCHED_MAX_STEPS - MAX_TO_KEEP + 1, WATCHED_MAX_STEPS + 1)
    )


def _rss_mb(pid):
    """The resident memory of a process in MB; None once it has ended."""
    try:
        with open("/proc/%d/status" % pid) as status:
            found = re.search(r"^VmRSS:\s+(\d+) kB$", status.read(), re.M)
    except FileNotFoundError:
        return None
    return int(found.group(1)) / 1024 if found else None


# The soak: thousands of small steps, a checkpoint every 100.
SOAK_STEPS = 2000
SOAK_BATCH_SIZE = 8
# The median resident memory over the last quarter of the soak may exceed
# that over its second quarter (after the warm-up) by this much at most.
SOAK_RSS_GROWTH_MB = 30


@pytest.mark.slow
def test_a_long_run_keeps_its_memory_and_five_checkpoints(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    trainer = _start(
        SINGLE,
        cifar10_data_dir,
        train_dir,
        "--batch_size=%d" % SOAK_BATCH_SIZE,
        "--max_steps=%d" % SOAK_STEPS,
        "--save_checkpoint_steps=100",
    )
    samples = []  # (newest saved step, RSS in MB)
    try:
        while trainer.poll() is None:
            samples.append((_newest_step(train_dir), _rss_mb(trainer.pid)))
            time.sleep(0.1)
    finally:
        _kill(trainer)
    assert trainer.returncode == 0

    def median_rss(first_step, last_step):
        return statistics.median(
            rss
            for step, rss in samples
            if first_step <= step <= last_step and rss is not None
        )

    second_quarter = median_rss(SOAK_STEPS // 4, SOAK_STEPS // 2 - 1)
    last_quarter = median_rss(SOAK_STEPS * 3 // 4, SOAK_STEPS)
    assert last_quarter - second_quarter < SOAK_RSS_GROWTH_MB, samples
    indexes = glob.glob(str(train_dir / "model.ckpt-*.index"))
    assert len(indexes) == MAX_TO_KEEP
    assert checkpoint_steps(train_dir) == list(
        range(SOAK_STEPS - 400, SOAK_STEPS + 1, 100)
    )


@pytest.mark.slow
def test_trainer_and_eval_skip_a_truncated_newest_checkpoint(
    single_runs, cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    *_, before, newest = copy_checkpoints(single_runs.train_dir, train_dir)
    truncate_checkpoint(str(train_dir / ("model.ckpt-%d" % newest)))
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
