"""The log and the closing report say how many steps loss scaling skipped."""

import re

import tensorflow as tf

from multigpu.graph import step_optimizer
from multigpu.run import report


def _run_with_skips(skips, capsys):
    """Runs len(skips) steps; step i is skipped where skips[i]."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = step_optimizer.LossScaleOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1),
            step_optimizer.LossScaling(128.0, True, 1000),
        )
        weight = tf.compat.v1.get_variable("w", initializer=1.0)
        skip = tf.compat.v1.placeholder(tf.bool, [])
        # A skipped step's gradient is infinite.
        loss = tf.where(skip, float("inf"), 1.0) * weight
        train_op = opt.apply_gradients(
            opt.compute_gradients(loss), global_step=global_step
        )
        hook = report.RunReportHook(tf.constant(0.5))
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            capsys.readouterr()
            for each in skips:
                sess.run(train_op, feed_dict={skip: each})
        lines = capsys.readouterr().out.splitlines()
    closing = report.closing_report(hook, 1, "/tmp/x", [])
    return lines, closing


def test_each_skipped_step_is_one_line_and_the_report_counts_them(capsys):
    lines, closing = _run_with_skips([False, True, False, True], capsys)

    assert [re.sub(r"^\S+ \S+: ", "", line) for line in lines] == [
        "step 2 skipped: its float16 gradients were not finite; the loss "
        "scale is now 64 (1 step(s) skipped in all)",
        "step 4 skipped: its float16 gradients were not finite; the loss "
        "scale is now 32 (2 step(s) skipped in all)",
    ]
    assert (
        "Dynamic loss scaling skipped 2 step(s) in all (non-finite float16 "
        "gradients); the loss scale is now 32." in closing.splitlines()
    )


def test_a_run_without_dynamic_scaling_reports_no_skips(capsys):
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        hook = report.RunReportHook(tf.constant(0.5))
        one = tf.constant(1)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            sess.run(one)
    closing = report.closing_report(hook, 1, "/tmp/x", [])
    assert "skipped" not in closing
    assert hook.skipped is None
