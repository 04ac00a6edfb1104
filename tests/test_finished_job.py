"""A finished job started again trains nothing, on every kind of run.

One process reads its newest checkpoint and does not start; in a cluster
the chief writes nothing and every worker stops before step 1, as its
session starts at --max_steps (`kinds.Kind.finished_hooks`). Before, the
workers of a finished cluster job trained one more step each, saved it and
wrote a second event file.

The first run ends at --max_steps exactly: its checkpoint is
model.ckpt-MAX_STEPS and holds that global step. In the ps cluster the
chief is frozen (SIGSTOP) in its first step while worker 1 trains the job
to its last step, then goes on: its step, begun at step 0, claims no global
step past --max_steps (`step_optimizer.claiming`). Before, it landed as
step 7 and the chief saved model.ckpt-7.
"""

import os
import signal

import pytest
import tensorflow as tf
from conftest import checkpoint_steps, folder_contents
from helpers.cluster import wait_for_step
from helpers.output_lines import TENSORFLOW_LINE

MAX_STEPS = 6
# kind -> (flags, ps tasks, whether the chief is frozen in its first step).
KINDS = {
    "ps": ((), 1, True),
    "ps_sync": (("--sync_replicas",), 1, False),
    "workers_only": (("--variable_update=replicated",), 0, False),
}


def _run_job(cluster, num_ps, frozen_chief=False):
    """Starts every task of the cluster; their exit codes, ps first.

    frozen_chief: the chief is stopped once worker 1 logged its first step
    (the chief's first step takes longer), and goes on once worker 1
    logged the job's last step (worker 1 then waits for the chief's
    checkpoint of it before it ends: `cluster.report_done`).
    """
    names = ["ps%d" % i for i in range(num_ps)] + ["worker0", "worker1"]
    for name in names:
        cluster.start(name.rstrip("01"), int(name[-1]))
    if frozen_chief:
        wait_for_step(cluster, "worker1", 1)
        os.kill(cluster.processes["worker0"].pid, signal.SIGSTOP)
        try:
            wait_for_step(cluster, "worker1", MAX_STEPS)
        finally:
            os.kill(cluster.processes["worker0"].pid, signal.SIGCONT)
    return [cluster.wait(name)[0] for name in names]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_finished_cluster_job_started_again_trains_nothing(
    make_cluster, kind
):
    flags, num_ps, frozen_chief = KINDS[kind]
    cluster = make_cluster(
        2,
        "--max_steps=%d" % MAX_STEPS,
        "--batch_size=4",
        "--log_frequency=1",
        *flags,
        num_ps=num_ps,
    )
    assert _run_job(cluster, num_ps, frozen_chief) == [0] * (num_ps + 2)
    assert checkpoint_steps(cluster.train_dir(0)) == [0, MAX_STEPS]
    newest = cluster.train_dir(0) / ("model.ckpt-%d" % MAX_STEPS)
    step = tf.train.load_variable(str(newest), "global_step")
    assert step == MAX_STEPS
    before = folder_contents(cluster.train_dir(0))

    assert _run_job(cluster, num_ps) == [0] * (num_ps + 2)

    assert folder_contents(cluster.train_dir(0)) == before
    for index in (0, 1):
        log = cluster.log("worker%d" % index)
        ours = [ln for ln in log.splitlines() if not TENSORFLOW_LINE.search(ln)]
        assert ours[-1] == (
            "worker task %d: the job is already at global step %d, at or past"
            " --max_steps=%d; nothing to train (raise --max_steps on every "
            "task to train on)" % (index, step, MAX_STEPS)
        ), log[-3000:]
        assert "training from step" not in log
