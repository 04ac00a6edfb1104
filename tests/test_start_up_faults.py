"""What a run that fails at start-up leaves: one line, and its folder as found.

A full disk at start ends every process of the run with one line; a signal
before step 1 leaves the train_dir as it was; a resume removes what an
interrupted save left, and only that; a sync worker that ends before its
session logs nothing after its line.
"""

import gc
import glob
import re
import signal
import subprocess

import pytest
import tensorflow as tf
from conftest import SCRIPT, checkpoint_steps, error_line, folder_contents
from helpers.cluster import FAULT_TIMEOUT_SECS, free_ports
from helpers.scripts import signal_when, start_script
from helpers.training import SINGLE, run_trainer, trainer_flags

from multigpu.distributed import cluster
from multigpu.graph import step_optimizer
from verification.data_files import fill_disk

# A tmpfs this small, filled in blocks of 64 KiB, keeps no byte free.
FULL_DISK_SIZE = "256k"


def _full_disk(small_disk):
    """A mounted tmpfs filled to its last byte."""
    disk = small_disk(FULL_DISK_SIZE)
    fill_disk(disk)
    return disk


def _no_space_line(script, train_dir):
    return (
        "%s: error: could not write %s/trainer.lock (No space left on "
        "device; 0.0 MB free on its disk); free space on its disk, then run "
        "again" % (script, train_dir)
    )


@pytest.mark.slow
def test_a_full_disk_at_start_ends_the_trainer_in_one_line(
    small_disk, cifar10_data_dir
):
    disk = _full_disk(small_disk)
    train_dir = disk / "train"
    line = error_line(
        "cifar10_train.py",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % train_dir,
        "--max_steps=2",
    )
    assert line == _no_space_line("cifar10_train.py", train_dir)
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


@pytest.mark.slow
@pytest.mark.parametrize("num_ps", [1, 0], ids=["ps", "workers_only"])
def test_a_full_disk_at_start_ends_every_task_of_a_cluster_in_one_line(
    small_disk, make_cluster, num_ps
):
    disk = _full_disk(small_disk)
    cluster = make_cluster(
        2,
        "--max_steps=20",
        "--operation_timeout_secs=%d" % FAULT_TIMEOUT_SECS,
        *([] if num_ps else ["--variable_update=replicated"]),
        num_ps=num_ps,
    )
    names = ["worker0", "worker1"] + ["ps0"] * num_ps
    for index in range(num_ps):
        cluster.start("ps", index)
    cluster.start("worker", 0, "--train_dir=%s" % (disk / "train"))
    cluster.start("worker", 1)
    ends = {}
    for name in names:
        code, _ = cluster.wait(name)
        ends[name] = code, cluster.log(name).strip().split("\n")[-1]
    lines = {name: cluster.log(name) for name in names}
    assert [name for name in names if "Traceback" in lines[name]] == []
    assert ends["worker0"] == (1, _no_space_line(SCRIPT, disk / "train"))
    # The chief's going cancels worker 1's start-up copy, or its session.
    assert re.match(
        r"%s: error: lost the cluster after 0 local steps \(\w+Error\): "
        r"unreachable: worker task 0 \(%s\)"
        % (SCRIPT, cluster.worker_addresses[0]),
        ends["worker1"][1],
    ), ends["worker1"]
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]
    assert {name: code for name, (code, _) in ends.items()} == dict.fromkeys(
        names, 1
    ), ends


# What a kill -9 during the save of step 9 leaves (the sharded saver's
# folder of parts being written), and the user's files named alike.
INTERRUPTED_SAVE = {
    "model.ckpt-9_temp/part-00000-of-00001.data-00000-of-00001"
    ".tempstate1234": bytes(2**20),
    "model.ckpt-9_temp/part-00000-of-00001.index": b"index",
}
USERS_FILES = {
    "model.ckpt-8_temp/notes.txt": b"notes",
    "model.ckpt-9_temp.txt": b"mine",
}


@pytest.mark.slow
def test_a_resume_removes_what_an_interrupted_save_left_and_nothing_else(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    run_trainer(SINGLE, cifar10_data_dir, train_dir, "--max_steps=2")
    for name, content in {**INTERRUPTED_SAVE, **USERS_FILES}.items():
        (train_dir / name).parent.mkdir(exist_ok=True)
        (train_dir / name).write_bytes(content)
    run_trainer(SINGLE, cifar10_data_dir, train_dir, "--max_steps=4")
    left = folder_contents(train_dir)
    assert sorted(name for name in left if "_temp" in name) == sorted(
        USERS_FILES
    )
    assert {name: left[name] for name in USERS_FILES} == USERS_FILES
    assert checkpoint_steps(train_dir) == [0, 2, 4]


# Seconds a trainer may take to reach the file a test waits for, and to end.
START_DEADLINE_SECS = 180


# (when the signal goes, the user's files in the train_dir before the
# run): the first line comes before the data are read, seconds before the
# run sets its handler; the event file is the run's last write before the
# session is made (seconds before step 1).
START_UP_POINTS = {
    "new_folder_at_the_first_line": (
        lambda train_dir, log: re.search("^NOTE: ", log.read_text(), re.M),
        None,
    ),
    "users_folder_at_the_event_file": (
        lambda train_dir, log: glob.glob(
            str(train_dir / "events.out.tfevents.*")
        ),
        {"notes.txt": b"n\n"},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(START_UP_POINTS))
def test_a_signal_before_step_1_leaves_the_train_dir_as_it_was(
    point, cifar10_data_dir, tmp_path
):
    ready, found = START_UP_POINTS[point]
    train_dir, log_path = tmp_path / "train", tmp_path / "train.log"
    for name, content in (found or {}).items():
        train_dir.mkdir(exist_ok=True)
        (train_dir / name).write_bytes(content)
    process = start_script(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=1000"),
        log_path=log_path,
    )
    code, output = signal_when(
        process,
        log_path,
        lambda: ready(train_dir, log_path),
        signal.SIGTERM,
        START_DEADLINE_SECS,
    )
    assert code == 143, output[-3000:]
    assert output.strip().split("\n")[-1] == (
        "cifar10_train.py: interrupted (SIGTERM) before step 1; nothing was "
        "trained, and what the run wrote in %s is removed; run the same "
        "command to start" % train_dir
    )
    if found is None:
        assert not train_dir.exists()
    else:
        assert folder_contents(train_dir) == found


@pytest.mark.slow
def test_a_profile_a_worker_cannot_write_is_refused_before_step_1(
    small_disk, cifar10_data_dir
):
    disk = small_disk("1m")
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    ps, chief, worker = ("127.0.0.1:%d" % port for port in free_ports(3))
    line = error_line(
        SCRIPT,
        "--ps_hosts=%s" % ps,
        "--worker_hosts=%s,%s" % (chief, worker),
        "--job_name=worker",
        "--task_index=1",
        "--cpu_towers",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % (disk / "train"),
        "--profile_steps=2,3",
    )
    assert line == (
        "%s: error: --profile_steps=2,3 writes its profile under "
        "--train_dir=%s, which is on a read-only file system; pass a "
        "--train_dir this process can write, or drop --profile_steps"
        % (SCRIPT, disk / "train")
    )


def test_a_sync_worker_that_ends_before_its_session_logs_no_unread_tensor(
    caplog,
):
    # A worker refused or interrupted before its session never reads the
    # optimizer's readiness tensor, which TensorFlow logs as it is deleted,
    # at exit: a block of '=' lines after the worker's one line.
    spec = tf.train.ClusterSpec(
        {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    )
    task = cluster.ClusterTask(spec, "worker", 1, True, 2)
    with tf.Graph().as_default():
        weight = tf.compat.v1.get_variable("weight", initializer=1.0)
        opt = task.kind.step_optimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            step_optimizer.Steps(
                None, task.replicas_to_aggregate, task.num_workers, None
            ),
        ).sync
        opt.apply_gradients(
            opt.compute_gradients(weight * weight),
            tf.compat.v1.train.get_or_create_global_step(),
        )
        cluster.sync_hooks(opt, task)
    del opt
    gc.collect()
    assert [
        r.getMessage() for r in caplog.records if r.levelname == "ERROR"
    ] == []
