"""A ps cluster worker's step claims its global step before it writes.

Each step of a ps cluster worker takes its global step in one atomic op
(`step_optimizer.claiming`), so that steps the workers run at once never
land past --max_steps: a step whose claim would pass it writes nothing and
raises OutOfRangeError, which ends a `MonitoredSession` as the end of its input
does. A worker whose every step came too late still gets its closing
report, naming the steps the job went through meanwhile.
"""

import pytest
import tensorflow as tf

from multigpu.distributed import cluster
from multigpu.graph import step_optimizer
from multigpu.run import report

PS_WORKER = cluster.cluster_task("127.0.0.1:1", "127.0.0.1:2", "worker", 0)


def _one_weight_step(task, max_steps):
    """(train op, global step, weight): loss = weight, a rate of 0.25."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    weight = tf.compat.v1.get_variable("weight", initializer=1.0)
    opt = task.kind.step_optimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.25),
        step_optimizer.Steps(max_steps, 1, 1, None),
    ).optimizer
    train_op = opt.apply_gradients(
        opt.compute_gradients(weight), global_step=global_step
    )
    return train_op, global_step, weight


def test_a_ps_step_whose_claim_passes_max_steps_writes_nothing():
    with tf.Graph().as_default():
        train_op, global_step, weight = _one_weight_step(PS_WORKER, 2)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train_op)
            sess.run(train_op)
            with pytest.raises(tf.errors.OutOfRangeError, match="limit of 2"):
                sess.run(train_op)
            assert sess.run([global_step, weight]) == [2, 0.5]


def test_a_ps_session_ends_at_max_steps_as_at_the_end_of_its_input():
    with tf.Graph().as_default():
        train_op, _, weight = _one_weight_step(PS_WORKER, 2)
        hook = report.RunReportHook(weight)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            # The third step's claim ends the session.
            for _ in range(3):
                sess.run(train_op)
    assert (hook.runs, hook.first_step, hook.last_step) == (2, 0, 2)


def test_one_process_steps_claim_nothing():
    with tf.Graph().as_default():
        _one_weight_step(cluster.LOCAL_TASK, 2)
        ops = tf.compat.v1.get_default_graph().get_operations()
        assert [op.type for op in ops if "CountUpTo" in op.type] == []


def test_a_worker_that_ran_no_step_of_the_job_reports_the_steps_it_saw(
    capsys,
):
    hook = report.RunReportHook(None)
    hook.first_step, hook.last_step, hook.wall_secs = 0, 6, 2.0
    report.print_closing_report(hook, 4, None, [])
    assert capsys.readouterr().out.splitlines() == [
        "Trained 0 step(s) in this run, from step 0 to step 6, in 2.0 s "
        "(0.0 examples/sec on average).",
        "Checkpoints and event logs: the chief's (worker 0's) --train_dir.",
    ]

    hook.first_step = 6  # a finished job: its FinishedHook said so
    report.print_closing_report(hook, 4, None, [])
    assert capsys.readouterr().out == ""
