"""Cluster mode: ps and worker tasks as processes on 127.0.0.1.

Every process a test starts is ended by the test; every wait is bounded.
"""

import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    REPO,
    SCRIPT_ENV,
    bfloat16_conv_graph,
    checkpoint_steps,
    remapper_fuses_bfloat16,
    run_script,
)
from helpers import ports
from helpers.cluster import (
    SCRIPT,
    TASK_DEADLINE_SECS,
    free_ports,
    run_to_the_end,
    with_tracebacks,
)
from helpers.towers import cifar10_step, cifar10_step_graph

from multigpu.distributed import cluster, ps, sessions
from multigpu.graph import placement
from multigpu.train_dir import checkpoints

# The async run: enough examples to learn the sample set despite stale
# gradients.
ASYNC_BATCH_SIZE = 32
ASYNC_MAX_STEPS = 200


@pytest.mark.slow
def test_async_workers_reach_max_steps_and_only_the_chief_checkpoints(
    make_cluster, cifar10_data_dir, tmp_path
):
    cluster = make_cluster(
        2,
        "--batch_size=%d" % ASYNC_BATCH_SIZE,
        "--max_steps=%d" % ASYNC_MAX_STEPS,
        "--save_checkpoint_steps=100",
        # Stale gradients at the tutorial's learning rate of 0.1 make the
        # loss jump now and then; clipping keeps the run learning.
        "--clip_gradients=5",
    )
    steps = run_to_the_end(cluster, 2)

    # Each worker updates on its own: the local steps add up to the global
    # step, and none passes --max_steps, as each step claims its global
    # step before it writes (`step_optimizer.claiming`).
    assert max(g for _, g in steps) == ASYNC_MAX_STEPS
    assert sum(local for local, _ in steps) == ASYNC_MAX_STEPS
    assert checkpoint_steps(cluster.train_dir(0))[-1] == ASYNC_MAX_STEPS
    assert not cluster.train_dir(1).exists()
    assert "ps task 0: all 2 workers done." in cluster.log("ps0")
    # Each worker prints its own step lines (--log_frequency=5 of its
    # local steps), and the other worker's report points to the chief.
    for index, (local, _) in enumerate(steps):
        log = cluster.log("worker%d" % index)
        assert len(re.findall(r": step \d+, loss = ", log)) == local // 5
    assert cluster.log("worker1").strip().split("\n")[-1] == (
        "Checkpoints and event logs: the chief's (worker 0's) --train_dir."
    )

    result = run_script(
        "cifar10_eval.py",
        "--run_once",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % cluster.train_dir(0),
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--num_examples=1000",
    )
    precision = float(re.search(r"precision @ 1 = ([\d.]+)", result.stdout)[1])
    # Chance is 0.1; by 200 steps of 32 the sample classes are learned.
    assert precision > 0.4


def _bfloat16_conv_in_a_worker_session(config):
    """`bfloat16_conv_graph`'s total, run through a gRPC server."""
    graph = bfloat16_conv_graph()
    with graph.as_default():
        init = tf.compat.v1.global_variables_initializer()
    server = tf.distribute.Server(
        {"worker": ["127.0.0.1:%d" % free_ports(1)[0]]}, "worker", 0
    )
    with tf.compat.v1.Session(server.target, graph, config) as sess:
        sess.run(init)
        return sess.run(graph.get_tensor_by_name("total:0"))


def test_a_bfloat16_worker_runs_the_conv_that_grapplers_fusion_breaks():
    task = cluster.cluster_task("127.0.0.1:1", "127.0.0.1:2", "worker", 0)
    assert not cluster.may_fuse_ops(task, tf.bfloat16)
    assert cluster.may_fuse_ops(task, tf.float32)
    assert cluster.may_fuse_ops(cluster.LOCAL_TASK, tf.bfloat16)
    unfused = placement.session_config(fuse_ops=False)
    assert np.isfinite(_bfloat16_conv_in_a_worker_session(unfused))
    if not remapper_fuses_bfloat16():
        pytest.skip("the remapper fuses no bfloat16 conv on this CPU")
    # Why: fused, the conv is an op that allows no bfloat16 (TF 2.21).
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _bfloat16_conv_in_a_worker_session(placement.session_config())
    assert "Op<name=_FusedConv2D" in error.value.message


@pytest.mark.slow
def test_a_cluster_trains_in_bfloat16_where_one_process_does(make_cluster):
    cluster_run = make_cluster(
        1, "--max_steps=3", "--use_fp16", "--force_cpu_bfloat16"
    )
    [(local_steps, global_step)] = run_to_the_end(cluster_run, 1)
    assert (local_steps, global_step) == (3, 3)
    assert checkpoint_steps(cluster_run.train_dir(0))[-1] == 3


@pytest.mark.slow
def test_sync_workers_aggregate_both_gradients_every_step(make_cluster):
    cluster = make_cluster(2, "--max_steps=40", "--sync_replicas")
    steps = run_to_the_end(cluster, 2)

    global_step = max(g for _, g in steps)
    assert global_step == 40
    # Each global step took two gradients; a gradient that arrived after
    # its step had been applied is dropped, so a few more may be computed.
    assert 2 * 40 <= sum(local for local, _ in steps) <= 2 * 40 + 4
    assert checkpoint_steps(cluster.train_dir(0))[-1] == 40
    # The chief's sync queue runner, whose step waits for gradients that no
    # worker sends after the last step, is cut off as the session closes:
    # that ends it, with no traceback.
    assert with_tracebacks(cluster, ["ps0", "worker0", "worker1"]) == []


@pytest.mark.slow
def test_mnist_workers_each_train_their_epochs_in_the_cluster(
    make_cluster, tmp_path
):
    cluster = make_cluster(
        2,
        "--data_dir=%s" % (tmp_path / "mnist"),
        "--batch_size=11",
        # Two epochs: after one, stale asynchronous updates left the model
        # at 0.235 once in about seven runs.
        "--num_epochs=2",
        script="mnist_multi_gpu_train.py",
    )
    steps = run_to_the_end(cluster, 2)

    # Each worker reads two epochs of the 3,000 sample images by itself:
    # floor(6000 / 11) = 545 steps.
    assert [local for local, _ in steps] == [545, 545]
    assert max(g for _, g in steps) == 1090
    # The chief saves at its own end, while the other may still train.
    assert 545 <= checkpoint_steps(cluster.train_dir(0))[-1] <= 1090
    accuracy = re.search(r"test accuracy = ([\d.]+)", cluster.log("worker0"))
    # Chance is 0.1; the sample digits are learned in far fewer steps.
    assert float(accuracy[1]) > 0.5
    assert "test accuracy" not in cluster.log("worker1")


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--job_name=chief"],
            "--job_name must be 'ps' or 'worker', got 'chief'",
        ),
        (
            ["--job_name=worker", "--task_index=2"],
            "--task_index=2 is out of range: --worker_hosts lists 2 task(s),"
            " so 0..1",
        ),
        (
            ["--job_name=worker", "--worker_hosts=127.0.0.1:2223,127.0.0.1"],
            "--worker_hosts: '127.0.0.1' has no port; expected HOST:PORT, "
            "e.g. localhost:2222",
        ),
    ],
)
def test_bad_cluster_flags_are_errors_with_their_own_message(flags, message):
    result = run_script(
        SCRIPT,
        "--ps_hosts=127.0.0.1:2222",
        "--worker_hosts=127.0.0.1:2223,127.0.0.1:2224",
        "--cpu_towers",
        *flags,
        expect_success=False,
    )
    assert result.stderr.strip().endswith(
        "cifar10_multi_gpu_train.py: error: " + message
    )


def test_one_host_port_for_two_workers_of_workers_only_names_worker_hosts():
    with pytest.raises(ValueError) as error:
        cluster.cluster_task("", "127.0.0.1:2222,127.0.0.1:2222", "worker", 0)
    assert str(error.value) == (
        "--worker_hosts lists 127.0.0.1:2222 more than once; every task "
        "needs a HOST:PORT of its own"
    )


def test_one_host_port_for_two_tasks_is_refused():
    with pytest.raises(ValueError) as error:
        cluster.cluster_task("127.0.0.1:2222", "127.0.0.1:2222", "worker", 0)
    assert str(error.value) == (
        "--ps_hosts and --worker_hosts list 127.0.0.1:2222 more than once; "
        "every task needs a HOST:PORT of its own"
    )


def test_a_server_says_it_listens_on_all_interfaces_unauthenticated(capsys):
    ps_port, worker_port = free_ports(2)
    task = cluster.cluster_task(
        "127.0.0.1:%d" % ps_port, "127.0.0.1:%d" % worker_port, "worker", 0
    )
    ps.start_server(task, None)
    assert capsys.readouterr().out == (
        "worker task 0: gRPC server listening on all interfaces, port %d, "
        "with no authentication: whoever reaches the port can run any graph "
        "as this user; keep it behind a firewall or on a private network\n"
        % worker_port
    )
    # It answers on another address than the spec's 127.0.0.1 too.
    assert ps.answers("127.0.0.2:%d" % worker_port)


def test_a_port_in_use_is_one_line_naming_it():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        task = cluster.cluster_task(
            "127.0.0.1:%d" % port, "127.0.0.1:%d" % free_ports(1)[0], "ps", 0
        )
        with pytest.raises(ValueError) as error:
            ps.start_server(task, None)
    assert str(error.value).startswith(
        "--ps_hosts: ps task 0 cannot listen on port %d of 127.0.0.1:%d ("
        % (port, port)
    )
    assert str(error.value).endswith(
        "); stop what uses that port or choose another"
    )


def test_a_port_a_running_task_holds_is_one_line_saying_a_task_runs_there():
    with ports.listening(ports.SETTINGS_FRAME) as running:
        task = cluster.cluster_task(
            "", "127.0.0.1:%d,%s" % (free_ports(1)[0], running), "worker", 1
        )
        with pytest.raises(ValueError) as error:
            ps.start_server(task, None)
    assert str(error.value) == (
        "--worker_hosts: worker task 1 cannot listen on port %s of %s (a "
        "TensorFlow server answers there: a task runs there already, this "
        "one started twice or a task of another job); that task runs on: "
        "stop it first, or give this task a port no job uses"
        % (running.rpartition(":")[2], running)
    )


def test_a_public_cluster_address_is_warned_about(capsys):
    cluster.cluster_task("8.8.8.8:2222", "127.0.0.1:2223", "worker", 0)
    assert "WARNING: 8.8.8.8:2222 is not a loopback or private address." in (
        capsys.readouterr().err
    )


# Examples per worker in the one synchronous step of the numeric test.
SYNC_WORKER_BATCH = 8
# The operation timeout of the numeric test's sessions: no op waits longer.
SYNC_TIMEOUT_SECS = 60
# One task's gRPC server and nothing else: argv is ps_hosts, worker_hosts,
# job_name, task_index. A separate process, so that the test can end it.
_SERVE_TASK = """
import sys
import tensorflow as tf
from multigpu.distributed import cluster
task = cluster.cluster_task(*sys.argv[1:4], int(sys.argv[4]))
tf.distribute.Server(task.cluster, task.job_name, task.task_index).join()
"""


def _start_servers(ps_hosts, worker_hosts):
    """Starts the servers of 1 ps and 2 worker tasks; waits for their ports.

    Returns:
      The `subprocess.Popen` of each; the caller must kill them.
    """
    servers = [
        subprocess.Popen(
            [sys.executable, "-c", _SERVE_TASK, ps_hosts, worker_hosts]
            + [job, str(index)],
            env=SCRIPT_ENV,
            cwd=REPO,
        )
        for job, index in [("ps", 0), ("worker", 0), ("worker", 1)]
    ]
    spec = cluster.cluster_task(ps_hosts, worker_hosts, "ps", 0).cluster
    deadline = time.time() + TASK_DEADLINE_SECS
    while ps.unreachable_tasks(spec).startswith("unreachable"):
        assert time.time() < deadline, ps.unreachable_tasks(spec)
        assert all(s.poll() is None for s in servers), "a server ended"
        time.sleep(0.5)
    return servers


def _sync_worker_session(task, images, labels):
    """Builds a sync worker's graph and opens its session on its server.

    As the trainer's `run_training`: the chief initialises the variables on
    the ps; the other worker waits for it. The hooks of `cluster.sync_hooks`
    run the sync init ops, the chief's token queue and its queue runner.

    Args:
      task: the worker's `cluster.ClusterTask`, sync_replicas True.
      images: float32 [batch, 24, 24, 3], this worker's batch.
      labels: int32 [batch].

    Returns:
      session: a `MonitoredSession`; the caller closes it.
      train_op: the op of one step.
      variables: dict name -> the trainable variables and global_step.
    """
    with (
        tf.Graph().as_default(),
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        _, train_op, hooks = cifar10_step_graph(images, labels, task=task)
        variables = {
            checkpoints.saved_name(v): v
            for v in tf.compat.v1.trainable_variables()
            + [tf.compat.v1.train.get_global_step()]
        }
        scaffold = tf.compat.v1.train.Scaffold()
        address = task.cluster.task_address("worker", task.task_index)
        target = "grpc://" + address
        config = cluster.task_config(
            placement.session_config(operation_timeout_secs=SYNC_TIMEOUT_SECS),
            task,
        )
        if task.is_chief:
            creator = tf.compat.v1.train.ChiefSessionCreator(
                scaffold, target, config
            )
        else:
            creator = sessions.PromptWorkerSessionCreator(
                scaffold, target, config
            )
        # The chief's queue runner waits for the gradients of a second step
        # that never comes: closing the session cancels it after 1 s.
        session = tf.compat.v1.train.MonitoredSession(
            creator, hooks, stop_grace_period_secs=1
        )
    return session, train_op, variables


def _two_sync_workers_step(images, labels):
    """Runs one synchronous step of 2 workers, each on half of the batch.

    Returns:
      before, after: dict variable name -> array, read from the ps before
      and after the step; 'global_step' is among them.
    """
    ps_port, *worker_ports = free_ports(3)
    ps_hosts = "127.0.0.1:%d" % ps_port
    worker_hosts = ",".join("127.0.0.1:%d" % p for p in worker_ports)
    servers = _start_servers(ps_hosts, worker_hosts)
    workers = []
    try:
        for index, worker_images, worker_labels in zip(
            range(2), np.split(images, 2), np.split(labels, 2)
        ):
            task = cluster.cluster_task(
                ps_hosts, worker_hosts, "worker", index, sync_replicas=True
            )
            workers.append(
                _sync_worker_session(task, worker_images, worker_labels)
            )
        chief, _, variables = workers[0]
        before = chief.run(variables)
        for session, train_op, _ in workers:
            # Returns at once: the first step's tokens are in the queue, and
            # the chief's queue runner applies the step once both gradients
            # are in the accumulators. One run each: a chief that ran again
            # would take the other first-step token and give the step its
            # own gradient twice; worker 1's, of step 0, would then be stale
            # and dropped.
            session.run(train_op)
        deadline = time.time() + SYNC_TIMEOUT_SECS
        while chief.run(variables["global_step"]) < 1:
            assert time.time() < deadline, "no step within the timeout"
            time.sleep(0.1)
        return before, chief.run(variables)
    finally:
        for session, _, _ in reversed(workers):
            session.close()
        for server in servers:
            server.kill()
            server.wait(timeout=30)


@pytest.mark.slow
# Closing the chief's session cancels its queue runner's wait for the next
# step, and TensorFlow re-raises that CancelledError in the runner's thread.
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning"
)
def test_two_sync_workers_step_like_one_worker_with_both_batches():
    rng = np.random.default_rng(0)
    batch = 2 * SYNC_WORKER_BATCH
    images = rng.normal(size=[batch, 24, 24, 3]).astype(np.float32)
    labels = rng.integers(0, 10, size=[batch]).astype(np.int32)

    before, after = _two_sync_workers_step(images, labels)
    assert (before.pop("global_step"), after.pop("global_step")) == (0, 1)
    _, expected, _ = cifar10_step(1, images, labels, before)

    assert sorted(after) == sorted(expected)
    for name, value in expected.items():
        # Measured: at most 7.5e-9 apart (float32 sums in another order).
        np.testing.assert_allclose(after[name], value, rtol=0, atol=1e-6)
        # The step really moved the weights: the check is not vacuous.
        assert not np.allclose(value, before[name], rtol=0, atol=1e-5), name
