"""How often a run prints its progress line (`loop_hooks.every_tenth`),
what it says when that lowers a --log_frequency given, and who prints it."""

import datetime
import re

import pytest
import tensorflow as tf

from multigpu.flags import choices
from multigpu.run import loop_hooks, training
from multigpu.train_dir import restore

DATE = datetime.datetime(2026, 12, 7, 13, 30, 1, 250000)


def test_a_short_run_prints_a_line_every_tenth_of_its_steps():
    # MNIST's default run: 60 steps, --log_frequency 100.
    assert loop_hooks.every_tenth(100, 60) == 6
    assert loop_hooks.every_tenth(10, 25) == 3
    assert loop_hooks.every_tenth(10, 3) == 1


def test_a_long_run_prints_a_line_every_log_frequency_steps():
    assert loop_hooks.every_tenth(10, 1000000) == 10
    assert loop_hooks.every_tenth(10, 100) == 10


def test_a_log_frequency_lowered_to_a_tenth_of_the_run_is_said(capsys):
    assert loop_hooks.say_if_capped(100, 60) == 6
    assert capsys.readouterr().out == (
        "--log_frequency=100 is more than a tenth of this run's 60 step(s): "
        "a progress line every 6 step(s)\n"
    )


def test_a_log_frequency_kept_as_given_says_nothing(capsys):
    assert loop_hooks.say_if_capped(10, 100) == 10
    assert capsys.readouterr().out == ""


def test_the_one_process_step_line_keeps_the_tutorials_form():
    assert loop_hooks.step_line(DATE, 30, 2.345, 1309.84, 0.0977) == (
        "2026-12-07 13:30:01.250000: step 30, loss = 2.35 "
        "(1309.8 examples/sec; 0.098 sec/batch)"
    )


def test_a_cluster_workers_step_line_names_its_task():
    assert loop_hooks.step_line(DATE, 30, 2.345, 1309.84, 0.0977, 1) == (
        "2026-12-07 13:30:01.250000: worker task 1: step 30, loss = 2.35 "
        "(1309.8 examples/sec; 0.098 sec/batch)"
    )


def _train_tiny_model(train_dir, log_frequency_given):
    """Trains a one-variable model 20 steps at --log_frequency=10."""
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        weight = tf.compat.v1.get_variable("weight", initializer=[1.0])
        loss = tf.reduce_sum(weight * weight)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
            loss, global_step=global_step
        )
        training.run_training(
            training.Step(train_op, loss, 1),
            choices.Schedule(10, 20, 1000, 0, log_frequency_given),
            choices.Start(False, restore.Pretrained()),
            training.TrainDir(str(train_dir)),
        )


@pytest.mark.parametrize("given", [True, False])
def test_a_run_says_it_lowers_the_log_frequency_only_when_given(
    tmp_path, capsys, given
):
    _train_tiny_model(tmp_path, given)
    out = capsys.readouterr().out
    said = (
        "--log_frequency=10 is more than a tenth of this run's 20 step(s): "
        "a progress line every 2 step(s)\n"
    )
    assert (said in out, re.findall(r": step (\d+), loss", out)) == (
        given,
        [str(step) for step in range(2, 21, 2)],
    )
