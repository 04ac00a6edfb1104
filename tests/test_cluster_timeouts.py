"""Operation timeouts bound the waits of a cluster, and only of a cluster."""

import time

import pytest
from conftest import error_line, free_port
from helpers.scripts import run_code

from multigpu.distributed import cluster
from multigpu.graph import placement


def test_outside_a_cluster_no_operation_timeout_applies():
    config = placement.session_config(operation_timeout_secs=1)
    assert (
        cluster.task_config(config, cluster.LOCAL_TASK).operation_timeout_in_ms
        == 0
    )
    assert config.operation_timeout_in_ms == 1000


def test_in_a_cluster_the_operation_timeout_applies():
    task = cluster.cluster_task(
        "", "127.0.0.1:2223,127.0.0.1:2224", "worker", 1
    )
    config = placement.session_config(operation_timeout_secs=7)
    assert cluster.task_config(config, task).operation_timeout_in_ms == 7000


@pytest.mark.slow
def test_an_operation_timeout_given_outside_a_cluster_is_refused(tmp_path):
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--operation_timeout_secs=1",
        "--train_dir=%s" % (tmp_path / "train"),
        "--data_dir=%s" % (tmp_path / "data"),
        "--fake_data",
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --operation_timeout_secs=1 "
        "bounds how long a cluster's tasks wait on each other, and no "
        "cluster is given (--ps_hosts and --worker_hosts, or TF_CONFIG): "
        "one process waits on no peer; drop it"
    )
    assert list(tmp_path.iterdir()) == []


# A worker whose wait outlasts its bound of 1 s; argv: two free ports.
_OUTLASTING_WAIT = """
import sys, time
from multigpu.distributed import cluster, watchdog
hosts = ",".join("127.0.0.1:" + port for port in sys.argv[1:3])
task = cluster.cluster_task("", hosts, "worker", 1)
with watchdog.ends_after(1, task, "a wait"):
    time.sleep(300)
"""
# Seconds the process may take to load TensorFlow, wait and end: half the
# 300 s it would sleep unbounded (62.6 s seen on a 2-core machine at load 40).
OUTLASTING_EXIT_BOUND_SECS = 150


def test_a_wait_past_its_bound_ends_the_worker_naming_what_is_unreachable():
    ports = [str(free_port()), str(free_port())]
    start = time.time()
    result = run_code(_OUTLASTING_WAIT, *ports)
    assert result.returncode == 1, result.stderr[-3000:]
    assert time.time() - start < OUTLASTING_EXIT_BOUND_SECS
    assert result.stderr.strip().split("\n")[-1] == (
        "-c: error: worker task 1: a wait did not end within 1 s of start-up "
        "(--operation_timeout_secs): unreachable: worker task 0 "
        "(127.0.0.1:%s), worker task 1 (127.0.0.1:%s); start every worker "
        "task again" % tuple(ports)
    )
