"""The training loop's own hooks: the step log, the NaN check, the chief's
summaries and checkpoints."""

import datetime
import math
import os
import time

import numpy as np
import tensorflow as tf

from multigpu.train_dir import checkpoints, event_files

# Most seconds between two progress lines (checked after each step).
PROGRESS_SECS = 30
# A run prints a progress line at least once per this fraction of its steps.
PROGRESS_FRACTION = 10


def every_tenth(log_frequency, steps):
    """Steps between progress lines: log_frequency, or a tenth of the run's
    steps (at least 1) when that is fewer."""
    return min(log_frequency, max(1, math.ceil(steps / PROGRESS_FRACTION)))


def say_if_capped(log_frequency, steps):
    """Prints one line when `every_tenth` lowers a --log_frequency the user
    gave for a run of steps steps; returns the steps between lines."""
    every = every_tenth(log_frequency, steps)
    if every < log_frequency:
        print(
            "--log_frequency=%d is more than a tenth of this run's %d "
            "step(s): a progress line every %d step(s)"
            % (log_frequency, steps, every),
            flush=True,
        )
    return every


def step_line(now, step, loss, examples_per_sec, sec_per_batch, worker=None):
    """`DATE: step N, loss = L (E examples/sec; S sec/batch)`; in a cluster
    (worker: the task index) `DATE: worker task W: step N, ...`."""
    who = "" if worker is None else "worker task %d: " % worker
    return "%s: %sstep %d, loss = %.2f (%.1f examples/sec; %.3f sec/batch)" % (
        now,
        who,
        step,
        loss,
        examples_per_sec,
        sec_per_batch,
    )


class StepLoggerHook(tf.compat.v1.train.SessionRunHook):
    """Prints a `step_line`.

    E counts the examples of all towers; S is the mean since the last
    line. A line comes every `every_tenth` steps, or after the step that
    ends PROGRESS_SECS without one.
    """

    def __init__(self, loss, examples_per_step, schedule, worker=None):
        """loss: float32 scalar; schedule: the run's `choices.Schedule`;
        worker: the task index of a cluster's worker, or None."""
        self._loss = loss
        self._examples_per_step = examples_per_step
        self._log_frequency = schedule.log_frequency
        self._last_step = schedule.max_steps
        self._log_frequency_given = schedule.log_frequency_given
        self._worker = worker
        self.step = None
        self.runs = 0

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self.step = session.run(self._global_step)
        if coord.should_stop():
            return  # finished already (`FinishedHook`)
        print(
            "%s: training from step %d" % (datetime.datetime.now(), self.step)
        )
        self._start_time = time.time()
        self._runs_at_line = self.runs
        self._every = self._steps_between_lines()

    def _steps_between_lines(self):
        if self._last_step is None or self._last_step <= self.step:
            return self._log_frequency
        steps = self._last_step - self.step
        if self._log_frequency_given:
            return say_if_capped(self._log_frequency, steps)
        return every_tenth(self._log_frequency, steps)

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        self.step += 1
        self.runs += 1
        steps, now = self.runs - self._runs_at_line, time.time()
        if steps >= self._every or now - self._start_time >= PROGRESS_SECS:
            sec_per_batch = (now - self._start_time) / steps
            self._start_time, self._runs_at_line = now, self.runs
            # In a cluster other workers move the global step too.
            self.step = run_context.session.run(self._global_step)
            print(
                step_line(
                    datetime.datetime.now(),
                    self.step,
                    run_values.results,
                    self._examples_per_step / sec_per_batch,
                    sec_per_batch,
                    self._worker,
                ),
                flush=True,
            )


class NanLossHook(tf.compat.v1.train.SessionRunHook):
    """Stops training at the first step whose loss is NaN.

    As `NanTensorHook` with `fail_on_nan_loss`, without its "Model
    diverged" ERROR line: the trainer's own error line says it once.
    """

    def __init__(self, loss):
        self._loss = loss

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context, run_values):
        if np.isnan(run_values.results):
            raise tf.compat.v1.train.NanLossDuringTrainingError


class SummarySaverHook(tf.compat.v1.train.SummarySaverHook):
    """TensorFlow's summary writer, which also writes the last step's, and
    the histograms at a pace of their own.

    TensorFlow's writes at the first step and every save_steps after it, so
    a run of 300 steps had no summary past step 201. The histograms go with
    the summaries of the first step, of the last, and of the first summary
    step at least histogram_steps after the last histograms.
    """

    def __init__(self, last_step, histograms, histogram_steps, **kwargs):
        """histograms: string scalar, or None."""
        super().__init__(**kwargs)
        self._last_step = last_step
        self._histograms = histograms
        self._histogram_timer = tf.compat.v1.train.SecondOrStepTimer(
            every_steps=histogram_steps
        )
        self._histograms_requested = False

    def before_run(self, run_context):
        args = super().before_run(run_context)
        if self._next_step == self._last_step:
            self._request_summary = True
        fetched = list(self._get_summary_op() or [])
        self._histograms_requested = self._histograms_due()
        if self._histograms_requested:
            fetched.append(self._histograms)
        if self._request_summary and fetched:
            args.fetches["summary"] = fetched
        return args

    def _histograms_due(self):
        if self._histograms is None or not self._request_summary:
            return False
        return (
            self._next_step is None
            or self._next_step == self._last_step
            or self._histogram_timer.should_trigger_for_step(self._next_step)
        )

    def after_run(self, run_context, run_values):
        super().after_run(run_context, run_values)
        if self._histograms_requested:
            # The step just written: TensorFlow's hook counts on from it.
            self._histogram_timer.update_last_triggered_step(
                self._next_step - 1
            )


class CheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """TensorFlow's checkpoint saver, which adds the graph to a run once.

    TensorFlow's adds the graph to the event log at every start, and
    TensorBoard warns of more than one graph event per run.
    """

    def __init__(self, checkpoint_dir, **kwargs):
        super().__init__(checkpoint_dir, **kwargs)
        listing = []
        if os.path.isdir(checkpoint_dir):
            listing = os.listdir(checkpoint_dir)
        self._graph_written = any(
            name.startswith(event_files.EVENT_FILE_PREFIX) for name in listing
        )

    def after_create_session(self, session, coord):
        if not self._graph_written:
            super().after_create_session(session, coord)
            return
        # As TensorFlow's, but for the graph: the state at the first step.
        global_step = session.run(self._global_step_tensor)
        self._save(session, global_step)
        self._timer.update_last_triggered_step(global_step)


class SaveWatcher(tf.compat.v1.train.CheckpointSaverListener):
    """Knows the step of the checkpoint being written, if any (an error
    raised meanwhile comes from writing it); prints each save."""

    def __init__(self, train_dir):
        self.step = None
        self._train_dir = train_dir

    def before_save(self, session, global_step_value):
        checkpoints.refuse_links(self._train_dir, global_step_value)
        self.step = global_step_value

    def after_save(self, session, global_step_value):
        self.step = None
        print(
            "%s: saved the checkpoint of step %d: %s"
            % (
                datetime.datetime.now(),
                global_step_value,
                os.path.join(
                    self._train_dir,
                    "%s-%d"
                    % (checkpoints.CHECKPOINT_BASENAME, global_step_value),
                ),
            ),
            flush=True,
        )


# Steps between summaries by default, as the tutorial's trainers write them.
SUMMARY_STEPS = 100
# The points a shorter run's charts have at least, by default.
SUMMARY_POINTS = 20


def summary_steps(max_steps):
    if max_steps is None:
        return SUMMARY_STEPS
    return max(1, min(SUMMARY_STEPS, max_steps // SUMMARY_POINTS))


def chief_hooks(train_dir, scaffold, schedule, watched, histograms):
    """The chief's step counter, summary writer, checkpoint saver and event
    file watcher. save_summaries_steps 0 is `summary_steps`, with the
    histograms every SUMMARY_STEPS; None writes no summaries at all, not
    even the step counter's global_step/sec.
    """
    save_summaries_steps = schedule.save_summaries_steps
    hooks = []
    if save_summaries_steps is not None:
        every = save_summaries_steps or summary_steps(schedule.max_steps)
        hooks += [
            tf.compat.v1.train.StepCounterHook(
                every_n_steps=every, output_dir=train_dir
            ),
            SummarySaverHook(
                last_step=schedule.max_steps,
                histograms=histograms,
                histogram_steps=save_summaries_steps or SUMMARY_STEPS,
                save_steps=every,
                output_dir=train_dir,
                scaffold=scaffold,
            ),
        ]
    hooks.append(
        CheckpointSaverHook(
            train_dir,
            save_steps=schedule.save_checkpoint_steps,
            scaffold=scaffold,
            checkpoint_basename=checkpoints.CHECKPOINT_BASENAME,
            listeners=[watched.saves],
        )
    )
    return [*hooks, watched.events]
