"""Workers of a cluster agree on their settings before step 1, or all end.

Worker tasks as processes on 127.0.0.1; every process a test starts is ended
by the test, every wait is bounded.
"""

import os
import re
import signal
import time

import pytest
from conftest import checkpoint_steps, free_port, run_script
from helpers.cluster import FAULT_EXIT_BOUND_SECS, wait_for_step

from multigpu.distributed import agreement, cluster

SCRIPT = "cifar10_multi_gpu_train.py"
# The start-up wait of the runs that must end by agreement: far above the
# seconds an agreement takes, so that a run ended by the wait fails the bound.
PATIENT_SECS = 150
# The start-up wait of the runs whose peer never comes.
IMPATIENT_SECS = 5


def test_a_differing_setting_is_named_with_every_tasks_value():
    line = agreement.difference(
        [
            {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
            {"batch_size": 4, "learning_rate": 0.01, "model": "tutorial"},
            {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
        ]
    )
    assert line == (
        "--learning_rate differs between the workers: worker task 0 has "
        "0.1, worker task 1 has 0.01, worker task 2 has 0.1; start every "
        "worker with the same --learning_rate (docs/cluster.md)"
    )


def test_equal_settings_agree():
    settings = {"clip_gradients": 0.0, agreement.VARIABLES: "2 variables"}
    assert agreement.difference([settings, dict(settings)]) is None


def test_settings_cross_the_cluster_as_codes_and_come_back_equal():
    settings = {"learning_rate_boundaries": ["32000", "48000"], "xla": True}
    codes = agreement.encode(settings)
    assert codes.shape == (agreement.SETTINGS_BYTES,)
    assert agreement.decode(codes) == settings


def _workers(make_cluster, timeout_secs):
    return make_cluster(
        2,
        "--variable_update=replicated",
        "--num_gpus=2",
        "--batch_size=4",
        "--learning_rate=0.1",
        "--max_steps=20",
        "--operation_timeout_secs=%d" % timeout_secs,
        num_ps=0,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, found",
    [
        (
            "--learning_rate=0.01",
            "--learning_rate differs between the "
            "workers: worker task 0 has 0.1, worker task 1 has 0.01; start "
            "every worker with the same --learning_rate (docs/cluster.md)",
        ),
        (
            "--num_gpus=1",
            "--num_gpus differs between the workers: worker "
            "task 0 has 2, worker task 1 has 1; start every worker with the "
            "same --num_gpus (docs/cluster.md)",
        ),
        (
            "--model=resnet20",
            "--model differs between the workers: worker "
            'task 0 has "tutorial", worker task 1 has "resnet20"; start every '
            "worker with the same --model (docs/cluster.md)",
        ),
    ],
    ids=["learning_rate", "num_gpus", "model"],
)
def test_a_setting_that_differs_ends_every_worker_naming_it(
    make_cluster,
    flag,
    found,
):
    cluster = _workers(make_cluster, PATIENT_SECS)
    start = time.time()
    cluster.start("worker", 0)
    cluster.start("worker", 1, flag)
    for name in ("worker0", "worker1"):
        code, _ = cluster.wait(name)
        lines = cluster.log(name).strip().split("\n")
        assert code == 1, lines[-20:]
        assert lines[-1] == SCRIPT + ": error: " + found
        assert "Traceback" not in cluster.log(name)
    assert time.time() - start < PATIENT_SECS
    assert not cluster.train_dir(0).joinpath("checkpoint").exists()


# A user's model module, its activation left open: each worker imports
# its own copy of it under one name.
DIFFERING_MODULE = """
import tensorflow as tf


def net(images, is_training):
    x = tf.compat.v1.layers.conv2d(images, 4, 3, strides=4, name="conv")
    x = tf.reduce_mean(%s, [1, 2])
    return tf.compat.v1.layers.dense(x, 10, name="dense")
"""


@pytest.mark.slow
def test_a_model_module_with_other_ops_ends_every_worker_naming_them(
    make_cluster, tmp_path
):
    cluster = _workers(make_cluster, PATIENT_SECS)
    for index, activation in enumerate(["tf.nn.relu(x)", "tf.tanh(x) * 3"]):
        folder = tmp_path / ("machine%d" % index)
        folder.mkdir()
        (folder / "differing.py").write_text(DIFFERING_MODULE % activation)
        cluster.start(
            "worker",
            index,
            "--model=differing:net",
            env={"PYTHONPATH": str(folder)},
        )
    for name in ("worker0", "worker1"):
        code, _ = cluster.wait(name)
        lines = cluster.log(name).strip().split("\n")
        assert code == 1, lines[-20:]
        assert re.fullmatch(
            SCRIPT + r": error: the model's ops differ between the workers: "
            r'worker task 0 has "(\d+) ops, sha1 \w{12}", worker task 1 has '
            r'"(\d+) ops, sha1 \w{12}"; every worker must run the same '
            r"model code \(docs/cluster.md\)",
            lines[-1],
        ), lines[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "peer_flags",
    [None, ("--model=no_such_module:logits",)],
    ids=["never_started", "cannot_build"],
)
def test_a_worker_whose_peer_never_listens_ends_naming_it(
    make_cluster,
    peer_flags,
):
    cluster = _workers(make_cluster, IMPATIENT_SECS)
    if peer_flags is not None:
        cluster.start("worker", 0, *peer_flags)
    cluster.start("worker", 1)
    code, seconds = cluster.wait("worker1")
    lines = cluster.log("worker1").strip().split("\n")
    assert code == 1, lines[-20:]
    assert seconds < FAULT_EXIT_BOUND_SECS
    assert lines[-1] == (
        "%s: error: worker task 1: no answer from worker task 0 (%s) within "
        "%d s of start-up (--operation_timeout_secs); start every worker "
        "task with the same flags, or look in its output for why it ended"
        % (SCRIPT, cluster.worker_addresses[0], IMPATIENT_SECS)
    )
    # No screen of TensorFlow's retries of a peer that is not there.
    assert not [line for line in lines if "Retrying" in line]
    if peer_flags is not None:
        code, _ = cluster.wait("worker0")
        assert code == 1


def test_a_worker_the_leader_refuses_for_its_group_size_is_told_so():
    task = cluster.cluster_task("", "h:1,h:2,h:3", "worker", 2)
    message = (
        "Device /job:worker/replica:0/task:2/device:CPU:0 is joining a group "
        "with size3, but that group has size 2 (group_key=1073741824)"
    )
    assert agreement.refused_by_leader(task, message) == (
        "worker task 2: worker task 0 (h:1) leads a group of 2 workers, not "
        "the 3 of this worker's --worker_hosts h:1,h:2,h:3: a job of other "
        "--worker_hosts runs there; this worker is not one of that job's, "
        "which trains on: give this job workers of its own (ports no job uses"
        " in --worker_hosts), or stop every worker of that job and start them"
        " all again (docs/cluster.md)"
    )
    assert agreement.refused_by_leader(task, "Connection reset") is None


@pytest.mark.slow
def test_a_worker_of_other_hosts_joining_a_running_job_is_refused_in_one_line(
    make_cluster, tmp_path
):
    job = _workers(make_cluster, PATIENT_SECS)
    job.start("worker", 1, "--num_gpus=1", "--max_steps=100000")
    job.start("worker", 0, "--num_gpus=1", "--max_steps=100000")
    wait_for_step(job, "worker0", 5)
    # Its own port, and the running job's chief as its worker task 0.
    hosts = "%s,127.0.0.1:%d" % (job.worker_addresses[0], free_port())

    stray = run_script(
        SCRIPT,
        *job.flags,
        "--worker_hosts=%s" % hosts,
        "--job_name=worker",
        "--task_index=1",
        "--train_dir=%s" % (tmp_path / "stray"),
        expect_success=False,
    )

    assert stray.returncode == 1
    assert stray.stderr == (
        "%s: error: worker task 1: worker task 0 (%s) leads a group of "
        "workers formed without this one: a job runs there whose "
        "--worker_hosts are not this worker's %s, or this worker restarted "
        "alone under its running peers; this worker is not one of that "
        "job's, which trains on: give this job workers of its own (ports no "
        "job uses in --worker_hosts), or stop every worker of that job and "
        "start them all again (docs/cluster.md)\n"
        % (SCRIPT, job.worker_addresses[0], hosts)
    )
    assert not (tmp_path / "stray").exists()
    # The job trains on: a signal to its chief saves the step it reached.
    os.kill(job.processes["worker0"].pid, signal.SIGTERM)
    assert [job.wait(name)[0] for name in ("worker0", "worker1")] == [143] * 2
    saved = checkpoint_steps(job.train_dir(0))[-1]
    assert saved >= 5
    assert (job.train_dir(0) / ("model.ckpt-%d.index" % saved)).exists()
    assert job.log("worker0").strip().split("\n")[-1] == (
        "%s: worker task 0 got SIGTERM: every worker stopped at step %d; "
        "saved %s; run the same commands on every worker to resume"
        % (SCRIPT, saved, job.train_dir(0) / ("model.ckpt-%d" % saved))
    )
