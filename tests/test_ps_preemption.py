"""A signal to a worker of the ps cluster other than the chief.

A ps and two workers on 127.0.0.1; SIGTERM (or SIGHUP) to worker 1 at step
10: it exits 143 (129) with one line saying that it left and that the chief
trains on, and the chief and the ps go on to --max_steps and exit 0,
asynchronous or with --sync_replicas (whose steps then take the chief's
gradients only).
"""

import os
import re
import signal
import time

import pytest
from conftest import checkpoint_steps
from helpers.cluster import wait_for_line, wait_for_step

from multigpu import errors

SCRIPT = "cifar10_multi_gpu_train.py"
MAX_STEPS = 100
# The global step after which worker 1 gets its signal.
SIGNAL_STEP = 10
# A generous bound on the signalled worker's end (it ends its step, says
# it is done to the ps and closes its session), on a loaded machine.
EXIT_BOUND_SECS = 60


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, sync, signum",
    [
        ((), "", signal.SIGTERM),
        (
            ("--sync_replicas",),
            ", each global step averaging --replicas_to_aggregate=2 "
            "gradients of the workers left",
            # A closed terminal: taken as SIGTERM is.
            signal.SIGHUP,
        ),
    ],
    ids=["async", "sync_replicas"],
)
def test_a_signal_to_a_ps_cluster_worker_ends_it_alone(
    make_cluster, flags, sync, signum
):
    cluster = make_cluster(
        2,
        "--max_steps=%d" % MAX_STEPS,
        "--log_frequency=1",
        "--operation_timeout_secs=60",
        *flags,
    )
    cluster.start("ps", 0)
    cluster.start("worker", 0)
    cluster.start("worker", 1)
    wait_for_step(cluster, "worker1", SIGNAL_STEP)
    os.kill(cluster.processes["worker1"].pid, signum)
    start = time.time()

    code, _ = cluster.wait("worker1")
    assert code == 128 + signum, cluster.log("worker1")[-3000:]
    assert time.time() - start < EXIT_BOUND_SECS
    last = cluster.log("worker1").strip().split("\n")[-1]
    left = re.fullmatch(
        re.escape(SCRIPT + ": worker task 1 interrupted (%s) at global ")
        % signal.Signals(signum).name
        + r"step (\d+)"
        + re.escape(
            " and left the cluster; the chief (worker task 0) and the other "
            "workers train on without it%s, and the chief saves the "
            "checkpoints; run the same command to rejoin" % sync
        ),
        last,
    )
    assert left, last
    assert SIGNAL_STEP <= int(left[1]) < MAX_STEPS
    for name in ("worker0", "ps0"):
        code, _ = cluster.wait(name)
        assert code == 0, cluster.log(name)[-3000:]
    assert checkpoint_steps(cluster.train_dir(0))[-1] == MAX_STEPS


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_ps_ends_it_with_one_line_naming_the_signal(
    make_cluster, signum
):
    cluster = make_cluster(1, "--operation_timeout_secs=300")
    cluster.start("ps", 0)
    wait_for_line(cluster, "ps0", r"^ps task 0: gRPC server listening")
    os.kill(cluster.processes["ps0"].pid, signum)

    code, _ = cluster.wait("ps0")

    assert code == 128 + signum, cluster.log("ps0")[-3000:]
    assert cluster.log("ps0").strip().split("\n")[-1] == (
        "%s: ps task 0 interrupted (%s): the job's variables it held are "
        "gone, and every worker ends within its --operation_timeout_secs; "
        "start the ps tasks again, then every worker, to resume from the "
        "chief's newest checkpoint" % (SCRIPT, signal.Signals(signum).name)
    )


def _call_tf_sessionrun():
    """Stands for the frame of TensorFlow's session run, whose C++ calls
    back into Python as it converts the run's results (NumPy's version
    check): a signal's handler may run there."""
    os.kill(os.getpid(), signal.SIGTERM)
    return "the run's results"


def test_a_signal_taken_inside_a_session_run_is_raised_after_the_run():
    # Raised in the callback, TensorFlow printed the exception and dropped
    # it: the ps task served on (1 SIGTERM in 6 of the test above).
    with errors.raising():
        # Not raised in the run's frame: the run returns its results.
        results = _call_tf_sessionrun()
        with pytest.raises(errors.Signalled) as raised:
            errors.raise_if_signalled()
    assert results == "the run's results"
    assert raised.value.exit_code == 143
    # Outside the block: no signal taken, nothing raised.
    errors.raise_if_signalled()
