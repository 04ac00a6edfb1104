"""Operation timeouts bound the waits of a cluster, and only of a cluster."""

import socket
import sys
import threading
import time
import types

import pytest
import tensorflow as tf
from conftest import error_line, free_port
from helpers import ports
from helpers.scripts import run_code

from multigpu.distributed import agreement, cluster, ps, sessions
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
from multigpu.distributed import cluster, ps
hosts = ",".join("127.0.0.1:" + port for port in sys.argv[1:3])
task = cluster.cluster_task("", hosts, "worker", 1)
with ps.ends_after(1, task, "a wait"):
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


def test_an_operation_timeout_of_0_is_no_bound_not_7200_s():
    for flag, bound in ((0, 0), (7, 7)):
        config = placement.session_config(operation_timeout_secs=flag)
        assert sessions.timeout_secs(config) == bound


# A wait of 2 s under a bound of 0 (--operation_timeout_secs=0).
_UNBOUNDED_WAIT = """
import sys, time
from multigpu.distributed import cluster, ps
hosts = ",".join("127.0.0.1:" + port for port in sys.argv[1:3])
task = cluster.cluster_task("", hosts, "worker", 1)
with ps.ends_after(0, task, "a wait"):
    time.sleep(2)
print("the wait ended")
"""


def test_a_wait_bounded_by_0_runs_to_its_end():
    result = run_code(_UNBOUNDED_WAIT, str(free_port()), str(free_port()))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "the wait ended\n"


class _LateCluster(tf.compat.v1.train.SessionCreator):
    """A session creator whose cluster answers at its third try."""

    def __init__(self):
        self.tries = 0

    def create_session(self):
        self.tries += 1
        if self.tries < 3:
            raise tf.errors.UnavailableError(None, None, "not up yet")
        return "session"


def test_the_first_session_under_a_bound_of_0_waits_for_the_cluster():
    late = _LateCluster()
    creator = sessions.BoundedSessionCreator(late, 0)
    assert creator.create_session() == "session"
    assert late.tries == 3


def test_the_agreement_under_a_bound_of_0_waits_for_a_late_peer():
    with socket.socket() as peer:
        peer.bind(("127.0.0.1", 0))
        hosts = "127.0.0.1:%d,127.0.0.1:%d" % (
            peer.getsockname()[1],
            free_port(),
        )
        task = cluster.cluster_task("", hosts, "worker", 1)
        # The peer's server answers after a few looks at it.
        late = threading.Timer(
            3 * agreement.PORT_POLL_SECS,
            ports.serve,
            (peer, ports.SETTINGS_FRAME),
        )
        late.start()
        agreement.wait_for_peers(task, 0)
        late.join()
        # It returned once the peer answered, not at its first look.
        assert ps.responds(hosts.split(",")[0])


def _watch(monkeypatch, task, now, fields, looks):
    """Looks of task's `ps.PsWatchdog` (timeout 30 s), each after setting
    now's fields (its clock 'secs' among them) to a look's values, on the
    module's clock and exit, until it ends the process.

    Returns:
      (the clocks of the looks it survived, the line it ended with).
    """
    monkeypatch.setattr(
        ps, "time", types.SimpleNamespace(time=lambda: now["secs"])
    )
    monkeypatch.setattr(ps, "_exit_saying", lambda line: sys.exit(line))
    watchdog = ps.PsWatchdog(task, 30)
    survived = []
    with pytest.raises(SystemExit) as ended:
        for look in looks:
            now.update(zip(fields, look))
            watchdog._look()
            survived.append(now["secs"])
    return survived, ended.value.code


def test_a_chief_gone_between_two_looks_of_the_watchdog_ends_its_worker(
    monkeypatch, tmp_path
):
    # Worker 1's looks: the chief answers before it published its job, and
    # is gone at the next look, which finds the job on the ps; timeout 30 s.
    job = {"id": "0a1b", "train_dir": str(tmp_path), "host": "h"}
    looks = [(1000, ps.ANSWERS, {}), (1002, ps.NO_PORT, {"job": job})]
    looks += [(1031, ps.NO_PORT, {"job": job}), (1032, ps.NO_PORT, {})]
    now = {"secs": 0, "chief": ps.ANSWERS, "held": {}}
    monkeypatch.setattr(
        ps,
        "probe",
        lambda address: now["chief"] if address == "h:2" else ps.ANSWERS,
    )
    monkeypatch.setattr(
        ps.jobs, "read_published", lambda address, timeout_ms: now["held"]
    )
    worker = cluster.cluster_task("h:1", "h:2,h:3", "worker", 1)

    survived, line = _watch(
        monkeypatch, worker, now, ("secs", "chief", "held"), looks
    )

    assert survived == [1000, 1002, 1031]
    assert line.startswith(
        "worker task 1: the chief, worker task 0 (h:2) has not accepted a "
        "connection for 30 s: ended, or its host is unreachable; the steps "
        "since the chief's newest checkpoint are in no checkpoint, so this "
        "worker stops: the job resumes from the newest checkpoint in the "
        "chief's --train_dir, %s on host h (job 0a1b)" % tmp_path
    )


def test_the_ps_watchdog_ends_a_worker_only_after_a_silence_of_its_timeout(
    monkeypatch,
):
    # (clock, what the ps does) at each look: a blip at 1000 s, an answer
    # at 1005 s, a second silence from 1100 s on; the timeout is 30 s.
    looks = [
        (1000, ps.SILENT),
        (1005, ps.ANSWERS),
        (1100, ps.SILENT),
        (1129, ps.SILENT),
        (1130, ps.SILENT),
    ]
    now = {"secs": 0, "state": ps.ANSWERS}
    monkeypatch.setattr(ps, "probe", lambda address: now["state"])
    chief = cluster.cluster_task("h:1", "h:2,h:3", "worker", 0)

    assert _watch(monkeypatch, chief, now, ("secs", "state"), looks) == (
        [1000, 1005, 1100, 1129],
        "lost the cluster: ps task 0 (h:1) holds its port but has not "
        "answered for 30 s: stopped or stuck",
    )
