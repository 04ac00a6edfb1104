"""The ps cluster's agreement before step 1: each worker against its chief.

A ps and two workers on 127.0.0.1, worker 1 started with another
--learning_rate: it ends before its first step with one line naming the
flag and both values, exit 1; the chief and the ps train on and exit 0.
The agreement's graph holds the worker's done signals once, and a chief
ends without TensorFlow's 'Object was never used' block.
"""

import re
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import REPO, SCRIPT_ENV, checkpoint_steps
from helpers.cluster import Cluster, wait_for_step

from multigpu.distributed import agreement, cluster, ps
from verification.accident_expect import another_job

SCRIPT = "cifar10_multi_gpu_train.py"
MAX_STEPS = 20
# A generous bound, from its start, on the differing worker's end (its
# start-up, the chief's session, one read of the chief's settings) on a
# loaded machine.
EXIT_BOUND_SECS = 120
# A chief's agreement hook, built and then collected, as at a trainer's end.
COLLECTED_CHIEF_HOOK = """
from multigpu import quiet_cpp_logs
import gc
import tensorflow as tf
from multigpu.distributed import agreement, cluster, ps
from verification.accident_expect import another_job
task = cluster.cluster_task("127.0.0.1:1", "127.0.0.1:2", "worker", 0)
with tf.Graph().as_default():
    done_ops = ps.done_signals(task)
    agreement.PsAgreementHook(task, {}, 60, done_ops).begin()
gc.collect()
"""


@pytest.mark.slow
def test_a_ps_cluster_worker_with_another_learning_rate_ends_naming_it(
    make_cluster,
):
    running = make_cluster(
        2,
        "--max_steps=%d" % MAX_STEPS,
        "--operation_timeout_secs=60",
    )
    running.start("ps", 0)
    running.start("worker", 0, "--learning_rate=0.1")
    running.start("worker", 1, "--learning_rate=0.05")

    code, seconds = running.wait("worker1")
    log = running.log("worker1")
    assert code == 1, log[-3000:]
    assert seconds < EXIT_BOUND_SECS
    assert log.strip().split("\n")[-1] == (
        SCRIPT + ": error: --learning_rate differs between the workers: "
        "worker task 0 has 0.1, worker task 1 has 0.05; start every worker "
        "with the same --learning_rate (docs/cluster.md)"
    )
    assert not re.search(r"step \d+,", log), log[-3000:]
    for name in ("worker0", "ps0"):
        code, _ = running.wait(name)
        assert code == 0, running.log(name)[-3000:]
    assert checkpoint_steps(running.train_dir(0))[-1] == MAX_STEPS


def test_a_ps_cluster_workers_graph_holds_one_done_signal_per_ps_task():
    task = cluster.cluster_task(
        "127.0.0.1:1,127.0.0.1:2", "127.0.0.1:3,127.0.0.1:4", "worker", 1
    )
    with tf.Graph().as_default() as graph:
        done_ops = ps.done_signals(task)
        agreement.PsAgreementHook(task, {}, 60, done_ops).begin()
    enqueues = [
        op.device
        for op in graph.get_operations()
        if op.type == "QueueEnqueueV2"
    ]
    assert enqueues == ["/job:ps/task:0", "/job:ps/task:1"]


def test_a_ps_cluster_chief_ends_without_an_object_never_used_error():
    result = subprocess.run(
        [sys.executable, "-c", COLLECTED_CHIEF_HOOK],
        capture_output=True,
        text=True,
        timeout=300,
        # As a user runs it: quiet_cpp_logs hides TensorFlow's C++ notices.
        env={
            k: v for k, v in SCRIPT_ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"
        },
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""


@pytest.mark.slow
def test_a_chief_of_another_job_or_other_flags_is_refused_of_the_job_joins(
    make_cluster,
):
    running = make_cluster(
        2,
        "--max_steps=100000",
        "--operation_timeout_secs=60",
        "--learning_rate=0.05",
    )
    running.start("ps", 0)
    running.start("worker", 0)
    running.start("worker", 1)
    wait_for_step(running, "worker1", 10)

    # A chief of another job (its own --train_dir and workers, the same
    # flags) on the running job's ps: refused, and the job trains on.
    other, code = _another_jobs_chief(running)
    log = other.log("worker0")
    assert code == 1, log[-3000:]
    assert log.strip().split("\n")[-1] == another_job(
        running.ps_address, running.train_dir(0), other.train_dir(0)
    )
    assert not other.train_dir(0).exists()
    reached = max(map(int, re.findall(r"step (\d+),", running.log("worker0"))))
    wait_for_step(running, "worker0", reached + 5)

    running.processes["worker0"].kill()
    running.wait("worker0")
    reached = max(map(int, re.findall(r"step (\d+),", running.log("worker1"))))

    # Restarted with another rate: refused before it restores anything.
    running.start("worker", 0, "--learning_rate=0.1")
    code, _ = running.wait("worker0")
    log = running.log("worker0")
    assert code == 1, log[-3000:]
    assert log.strip().split("\n")[-1] == (
        SCRIPT + ": error: the ps tasks hold a job started by a chief with "
        "other flags: --learning_rate (the job's chief has 0.05, this chief "
        "0.1); start this chief with that job's flags to rejoin it, or stop "
        "every task of that job, its ps tasks too, to start a new one "
        "(docs/cluster.md)"
    )
    assert running.processes["worker1"].poll() is None

    # Restarted with the job's flags: it trains on from the ps's variables.
    running.start("worker", 0)
    wait_for_step(running, "worker0", reached + 1)
    log = running.log("worker0")
    assert "the ps tasks hold this job already: training on from their " in log
    started = int(re.search(r"training from step (\d+)", log)[1])
    assert started >= reached


def _another_jobs_chief(running):
    """Runs the chief of another job on running's ps to its end: (its
    `Cluster`, its exit code)."""
    other = Cluster(running.tmp_path / "other", SCRIPT, 2)
    other.tmp_path.mkdir()
    other.flags[0] = "--ps_hosts=%s" % running.ps_address
    other.flags[2:] = running.flags[2:]
    try:
        other.start("worker", 0)
        code, _ = other.wait("worker0")
    finally:
        other.stop_all()
    return other, code
