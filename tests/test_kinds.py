"""The kinds of run are one table: code outside it asks the task's row.

Which kind a run is (one process, ps cluster, ps with sync replicas,
workers only) is decided in one place, `kinds.of`; a behaviour that differs
between the kinds is a column of `kinds.Kind`, so no other module tests
the kind itself (`task.workers_only`, `task.cluster is None`,
`task.sync_replicas`, `if task.cluster`).
"""

import ast

import pytest
import tensorflow as tf
from helpers.modules import ROOT, project_modules

from multigpu.distributed import cluster, kinds

# The one module that tells the kinds apart.
TABLE = "multigpu.distributed.kinds"
# The task's attributes whose test is a test of the kind.
KIND_ATTRIBUTES = ("workers_only", "sync_replicas", "cluster")


def _tests_of(tree):
    """The expressions a module tests: conditions and boolean operands."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            yield node.test
        elif isinstance(node, ast.BoolOp):
            yield from node.values
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node.operand


def kind_conditions(source):
    """The line numbers where source tests the kind of run itself."""
    lines = set()
    for test in _tests_of(ast.parse(source)):
        for node in ast.walk(test):
            if isinstance(node, ast.Attribute) and node.attr in (
                KIND_ATTRIBUTES
            ):
                lines.add(node.lineno)
    return sorted(lines)


def test_the_count_finds_every_way_of_testing_the_kind():
    source = "\n".join(
        [
            "if task.workers_only: pass",
            "x = 1 if task.cluster is None else 2",
            "y = task.sync_replicas and z",
            "if not task.cluster: pass",
            "if task.kind.sync: pass",
            "n = task.cluster.num_tasks('ps')",
        ]
    )
    assert kind_conditions(source) == [1, 2, 3, 4]


def test_no_module_outside_the_table_tests_which_kind_of_run_it_is_in():
    found = {
        name: kind_conditions(path.read_text())
        for name, path in project_modules(ROOT).items()
        if name != TABLE
    }
    assert {name: lines for name, lines in found.items() if lines} == {}


def _spec(**jobs):
    return tf.train.ClusterSpec(
        {
            job: ["localhost:%d" % (2222 + i) for i in range(n)]
            for job, n in jobs.items()
        }
    )


@pytest.mark.parametrize(
    "spec, sync_replicas, kind",
    [
        (None, False, kinds.LOCAL),
        (_spec(ps=1, worker=2), False, kinds.PS),
        (_spec(ps=1, worker=2), True, kinds.PS_SYNC),
        (_spec(worker=2), False, kinds.WORKERS_ONLY),
    ],
)
def test_a_run_is_the_kind_its_cluster_and_sync_flag_make(
    spec, sync_replicas, kind
):
    assert kinds.of(spec, sync_replicas) is kind


def test_every_kind_answers_every_column_with_a_value_of_its_type():
    for column in kinds.Kind._fields:
        types = {type(getattr(kind, column)) for kind in kinds.KINDS}
        assert len(types) == 1, (column, types)
        assert None not in [getattr(kind, column) for kind in kinds.KINDS]


def test_each_kind_makes_as_many_worker_batches_per_step_as_it_averages():
    ps = cluster.cluster_task("h:1", "h:2,h:3,h:4", "worker", 0)
    sync = cluster.cluster_task("h:1", "h:2,h:3,h:4", "worker", 0, True, 2)
    workers = cluster.cluster_task("", "h:2,h:3,h:4", "worker", 0)
    assert [
        task.replicas_per_step
        for task in (cluster.LOCAL_TASK, ps, sync, workers)
    ] == [1, 1, 2, 3]
