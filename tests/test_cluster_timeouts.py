"""Operation timeouts bound the waits of a cluster, and only of a cluster."""

import pytest
from conftest import error_line

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
