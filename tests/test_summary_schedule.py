"""When the training loop writes its summaries: the scalars and images at
the chosen pace, the histograms, the dearest by far, every 100 steps."""

import tensorflow as tf
from conftest import read_events
from tensorflow.python.training import training_util

from multigpu.flags import choices
from multigpu.graph import summaries
from multigpu.run import training
from multigpu.train_dir import restore


def _train_tiny_model(train_dir, max_steps, save_summaries_steps=0):
    """Trains a one-variable model with one scalar and one histogram.

    Returns:
      ([int], [int]): the steps of its scalar and of its histogram.
    """
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        weight = tf.compat.v1.get_variable("weight", initializer=[1.0, 2.0])
        loss = tf.reduce_sum(weight * weight)
        # The hooks read the step before the step moves it, as Estimator
        # has it: a step this small could otherwise move it first.
        with tf.control_dependencies(
            [training_util._get_or_create_global_step_read()]
        ):
            train_op = tf.compat.v1.train.GradientDescentOptimizer(
                0.01
            ).minimize(loss, global_step=global_step)
        summaries.scalar_summary("loss", loss)
        summaries.histogram_summary("weight", weight)
        training.run_training(
            training.Step(train_op, loss, 1),
            choices.Schedule(1000, max_steps, 1000, save_summaries_steps),
            choices.Start(False, restore.Pretrained()),
            training.TrainDir(str(train_dir)),
        )
    events = read_events(train_dir)
    return (
        [event.step for event in events.Scalars("loss")],
        [event.step for event in events.Histograms("weight")],
    )


def test_a_short_run_writes_20_scalars_and_histograms_every_100_steps(
    tmp_path,
):
    scalar_steps, histogram_steps = _train_tiny_model(tmp_path, 250)
    # Every 250 // 20 = 12 steps from the first, and the last step; the
    # histograms with the first scalars, the first ones 100 steps after
    # them (109 and 217) and the last.
    assert scalar_steps == [*range(1, 250, 12), 250]
    assert histogram_steps == [1, 109, 217, 250]


def test_a_chosen_summary_pace_writes_the_histograms_with_every_summary(
    tmp_path,
):
    scalar_steps, histogram_steps = _train_tiny_model(
        tmp_path, 120, save_summaries_steps=50
    )
    assert scalar_steps == [1, 51, 101, 120]
    assert histogram_steps == scalar_steps


def test_split_histograms_leaves_merged_summaries_without_one_as_they_are():
    with tf.Graph().as_default():
        scalar = summaries.scalar_summary("a", tf.constant(1.0))
        merged = tf.compat.v1.summary.merge([scalar])
        assert summaries.split_histograms(merged) == (merged, None)


def test_split_histograms_finds_them_in_nested_merged_summaries():
    with tf.Graph().as_default():
        scalar = summaries.scalar_summary("a", tf.constant(1.0))
        histogram = summaries.histogram_summary("b", tf.constant([1.0]))
        nested = tf.compat.v1.summary.merge(
            [tf.compat.v1.summary.merge([scalar, histogram])]
        )
        others, histograms = summaries.split_histograms(nested)
        assert [s.name for s in others.op.inputs] == [scalar.name]
        assert [s.name for s in histograms.op.inputs] == [histogram.name]
