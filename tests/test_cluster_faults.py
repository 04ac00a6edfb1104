"""Cluster mode's faults: a lost task ends its peers in one line naming it.

Every process a test starts is ended by the test; every wait is bounded.
"""

import re
import time

import pytest
from conftest import checkpoint_steps
from helpers import ports
from helpers.cluster import (
    FAULT_EXIT_BOUND_SECS,
    FAULT_TIMEOUT_SECS,
    TASK_DEADLINE_SECS,
    free_ports,
    wait_for_step,
    with_tracebacks,
)

from multigpu import errors
from multigpu.distributed import cluster, ps
from multigpu.graph import placement

# A ps in the fault tests waits for its workers to start as long as a test
# waits for a task (the workers' --operation_timeout_secs is short).
PS_PATIENCE = "--operation_timeout_secs=%d" % TASK_DEADLINE_SECS
# --max_steps of a sync job that loses a worker at global step 10.
SYNC_STEPS = 30


def _fault_flags():
    return ("--operation_timeout_secs=%d" % FAULT_TIMEOUT_SECS,)


@pytest.mark.slow
def test_a_sync_chief_trains_on_to_max_steps_past_a_killed_worker(
    make_cluster,
):
    # Without the chief's tokens for the lost worker, its step waited out
    # --operation_timeout_secs for a token in most runs, then exit 1.
    cluster = make_cluster(
        2, "--max_steps=%d" % SYNC_STEPS, "--sync_replicas", *_fault_flags()
    )
    cluster.start("ps", 0, PS_PATIENCE)
    cluster.start("worker", 0)
    cluster.start("worker", 1)
    wait_for_step(cluster, "worker0", 10)
    cluster.processes["worker1"].kill()

    code, _ = cluster.wait("worker0")
    assert with_tracebacks(cluster, ["worker0"]) == []
    if code == 1:
        # Its step still waited out its operation timeout for a token (1
        # run of 9 in the accident runner): it names the worker.
        lost = "unreachable: worker task 1 (%s)" % cluster.worker_addresses[1]
        assert lost in cluster.log("worker0"), cluster.log("worker0")[-3000:]
        return
    assert code == 0, cluster.log("worker0")[-3000:]
    assert checkpoint_steps(cluster.train_dir(0))[-1] == SYNC_STEPS


class _Session:
    """Records what a hook runs."""

    def __init__(self):
        self.runs = []

    def run(self, fetches):
        self.runs.append(fetches)


def test_a_sync_chief_gives_tokens_again_for_a_worker_lost_twice(monkeypatch):
    task = cluster.cluster_task("h:1", "h:2,h:3", "worker", 0)
    hook = cluster._LostWorkersHook("tokens", task)
    # Worker 1 answers, is killed, is restarted and answers, is killed.
    answers = iter([True, False, True, False])
    monkeypatch.setattr(ps, "responds", lambda address: next(answers))

    session, seen, lost = _Session(), set(), set()
    for _ in range(4):
        assert not hook._look(session, seen, lost)
    assert session.runs == ["tokens", "tokens"]


def test_a_sync_chief_gives_tokens_for_a_stopped_worker_that_holds_its_port():
    # Worker 1 answered a look, then was stopped (SIGSTOP): the kernel
    # still accepts on its port, and its server says nothing.
    with ports.listening() as stopped:
        task = cluster.cluster_task("h:1", "h:2,%s" % stopped, "worker", 0)
        hook = cluster._LostWorkersHook("tokens", task)
        session = _Session()
        assert not hook._look(session, {stopped}, set())
    assert session.runs == ["tokens"]


@pytest.mark.slow
def test_a_killed_ps_ends_the_worker_with_a_message_naming_it(make_cluster):
    cluster = make_cluster(1, "--max_steps=100000", *_fault_flags())
    cluster.start("ps", 0, PS_PATIENCE)
    cluster.start("worker", 0)
    wait_for_step(cluster, "worker0", 10)
    cluster.processes["ps0"].kill()

    code, seconds = cluster.wait("worker0")
    assert code == 1
    assert seconds < FAULT_EXIT_BOUND_SECS
    assert "unreachable: ps task 0 (%s)" % cluster.ps_address in (
        cluster.log("worker0")
    )


@pytest.mark.slow
def test_a_ps_whose_workers_never_start_gives_up_naming_them(make_cluster):
    cluster = make_cluster(2, "--operation_timeout_secs=3")
    cluster.start("ps", 0)

    code, _ = cluster.wait("ps0")
    assert code == 1
    assert cluster.log("ps0").strip().split("\n")[-1] == (
        "cifar10_multi_gpu_train.py: error: no connection from worker task 0 "
        "(%s), worker task 1 (%s) within --operation_timeout_secs=3; start "
        "every worker task, or raise the timeout"
        % tuple(cluster.worker_addresses)
    )


@pytest.mark.slow
def test_a_ps_ends_once_its_chief_is_done_naming_the_killed_worker(
    make_cluster,
):
    cluster = make_cluster(2, "--max_steps=40")
    cluster.start("worker", 0)
    cluster.start("worker", 1)
    # The ps gives its workers 10 s to start: worker 1 is up before it, and
    # the chief opens its port once it has read the job the ps holds.
    deadline = time.time() + TASK_DEADLINE_SECS
    while not ps.answers(cluster.worker_addresses[1]):
        assert time.time() < deadline
        time.sleep(0.5)
    cluster.start("ps", 0, "--operation_timeout_secs=10")
    wait_for_step(cluster, "worker1", 5)
    cluster.processes["worker1"].kill()

    code, _ = cluster.wait("worker0")
    assert code == 0, cluster.log("worker0")[-3000:]
    code, seconds = cluster.wait("ps0")
    assert code == 1
    assert seconds < 10 + 3 * ps.WATCHDOG_INTERVAL_SECS
    assert cluster.log("ps0").strip().split("\n")[-1] == (
        "cifar10_multi_gpu_train.py: error: ps task 0: the chief (worker "
        "task 0) is done, and worker task 1 (%s) did not say it was done "
        "within --operation_timeout_secs=10; the ps stops"
        % cluster.worker_addresses[1]
    )


@pytest.mark.slow
def test_a_ps_that_looks_only_after_its_workers_finished_ends_normally(
    make_cluster, capsys
):
    tasks = make_cluster(2, "--max_steps=4", "--batch_size=2")
    ps_task = cluster.cluster_task(
        tasks.ps_address, ",".join(tasks.worker_addresses), "ps", 0
    )
    config = cluster.task_config(placement.session_config(), ps_task)
    # The ps's server serves the workers; the ps looks at them only once
    # both have finished, their ports closed.
    server = ps.start_server(ps_task, config)
    for index in range(2):
        tasks.start("worker", index)
    for index in range(2):
        code, _ = tasks.wait("worker%d" % index)
        assert code == 0, tasks.log("worker%d" % index)[-3000:]
    assert not any(map(ps.answers, tasks.worker_addresses))
    capsys.readouterr()
    start = time.time()
    ps.serve_until_done(ps_task, server, config, timeout_secs=5)
    assert capsys.readouterr().out == "ps task 0: all 2 workers done.\n"
    assert time.time() - start < 5


def _chief_killed_at_step_10(make_cluster, num_workers):
    """A ps and num_workers workers, saving every 5 steps; kill -9 of the
    chief once the last worker logged step 10. Returns the cluster and
    the step of the chief's newest checkpoint."""
    cluster = make_cluster(
        num_workers,
        "--max_steps=100000",
        "--save_checkpoint_steps=5",
        *_fault_flags(),
    )
    cluster.start("ps", 0, PS_PATIENCE)
    for index in range(num_workers):
        cluster.start("worker", index)
    wait_for_step(cluster, "worker%d" % (num_workers - 1), 10)
    cluster.processes["worker0"].kill()
    cluster.wait("worker0")
    return cluster, checkpoint_steps(cluster.train_dir(0))[-1]


@pytest.mark.slow
def test_a_restarted_chief_trains_on_from_the_variables_the_ps_holds(
    make_cluster,
):
    cluster, saved = _chief_killed_at_step_10(make_cluster, 1)
    assert saved >= 5

    # Where it stops may change; the ps's step is at least the saved one.
    cluster.start("worker", 0, "--max_steps=%d" % (saved + 20))
    code, _ = cluster.wait("worker0")
    log = cluster.log("worker0")
    assert code == 0, log[-3000:]
    assert "the ps tasks hold this job already: training on from their " in log
    assert int(re.search(r"training from step (\d+)", log)[1]) >= saved
    assert checkpoint_steps(cluster.train_dir(0))[-1] == saved + 20
    code, _ = cluster.wait("ps0")
    assert code == 0


class _NoTokens:
    """A ps's done tokens when no worker ever says it is done."""

    def take(self, sess, wait_secs):
        time.sleep(0.1)
        return set()


def test_a_ps_whose_chief_is_gone_stops_naming_the_silent_workers():
    ps_port, *worker_ports = free_ports(3)
    task = cluster.cluster_task(
        "127.0.0.1:%d" % ps_port,
        ",".join("127.0.0.1:%d" % port for port in worker_ports),
        "ps",
        0,
    )
    start = time.time()
    with pytest.raises(errors.TrainingError) as error:
        ps._wait_for_done(task, None, _NoTokens(), timeout_secs=1)
    assert time.time() - start < 3
    assert str(error.value) == (
        "ps task 0: the chief, worker task 0 (127.0.0.1:%d), is gone: its "
        "port has not answered for --operation_timeout_secs=1, and no word "
        "from worker task 1 (127.0.0.1:%d); the ps stops" % tuple(worker_ports)
    )


@pytest.mark.slow
def test_a_worker_whose_chief_died_stops_naming_the_checkpoint_to_resume(
    make_cluster,
):
    cluster, newest = _chief_killed_at_step_10(make_cluster, 2)

    code, seconds = cluster.wait("worker1")
    last = cluster.log("worker1").strip().split("\n")[-1]
    assert code == 1, last
    assert seconds < FAULT_EXIT_BOUND_SECS
    ended = re.fullmatch(
        re.escape(
            "cifar10_multi_gpu_train.py: error: worker task 1: the chief, "
            "worker task 0 (%s) has not accepted a connection for "
            % cluster.worker_addresses[0]
        )
        + r"\d+"
        + re.escape(
            " s: ended, or its host is unreachable; the steps since the "
            "chief's newest checkpoint are in no checkpoint, so this worker "
            "stops: the job resumes from the newest checkpoint in the "
            "chief's --train_dir, %s on host " % cluster.train_dir(0)
        )
        + r"\S+ \(job [0-9a-f]{16}\): "
        + re.escape(
            "%s; start every task of the job again, the ps tasks first, "
            "then the chief (worker task 0) and the other workers, with the "
            "job's commands"
            % (cluster.train_dir(0) / ("model.ckpt-%d" % newest))
        ),
        last,
    )
    assert ended, last
