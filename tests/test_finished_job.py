"""A finished job started again trains nothing, on every kind of run.

One process reads its newest checkpoint and does not start; in a cluster
the chief writes nothing and every worker stops before step 1, as its
session starts at --max_steps (`kinds.Kind.finished_check`). Before, the
workers of a finished cluster job trained one more step each, saved it and
wrote a second event file.
"""

import pytest
from conftest import checkpoint_steps, folder_contents
from helpers.output_lines import TENSORFLOW_LINE

MAX_STEPS = 6
KINDS = {
    "ps": ((), 1),
    "ps_sync": (("--sync_replicas",), 1),
    "workers_only": (("--variable_update=replicated",), 0),
}


def _run_job(cluster, num_ps):
    """Starts every task of the cluster; their exit codes, ps first."""
    names = ["ps%d" % i for i in range(num_ps)] + ["worker0", "worker1"]
    for name in names:
        cluster.start(name.rstrip("01"), int(name[-1]))
    return [cluster.wait(name)[0] for name in names]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_finished_cluster_job_started_again_trains_nothing(
    make_cluster, kind
):
    flags, num_ps = KINDS[kind]
    cluster = make_cluster(
        2, "--max_steps=%d" % MAX_STEPS, "--batch_size=4", *flags, num_ps=num_ps
    )
    assert _run_job(cluster, num_ps) == [0] * (num_ps + 2)
    [step] = checkpoint_steps(cluster.train_dir(0))[-1:]
    assert step >= MAX_STEPS
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
