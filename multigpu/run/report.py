"""The closing report of a training run: what was trained, how fast, where
it is, and what to run next (an interrupted or failed run ends with its own
one line instead)."""

import datetime
import time

import tensorflow as tf

from multigpu.graph import step_optimizer, summaries
from multigpu.train_dir import checkpoints


class RunReportHook(tf.compat.v1.train.SessionRunHook):
    """Keeps the steps, the wall time and the last losses of a run.

    The cross-entropy is the mean of the towers' 'cross_entropy' terms in
    the `losses` collection (the last batch's). With the dynamic loss scale
    it prints a line for each step the scale skips.
    """

    def __init__(self, total_loss):
        """total_loss: float32 scalar."""
        self._total_loss = total_loss
        self.first_step = None
        self.last_step = None
        self.runs = 0
        self.wall_secs = 0.0
        self.losses = {}
        self.skipped = None
        self.scale = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        terms = [
            each
            for each in tf.compat.v1.get_collection("losses")
            if summaries.without_blocks(each.op.name) == "cross_entropy"
        ]
        self._fetches = {"total_loss": self._total_loss}
        if terms:
            self._fetches["cross_entropy"] = tf.add_n(terms) / len(terms)
        self._scaling = step_optimizer.find_skipped_steps(
            tf.compat.v1.get_default_graph()
        )

    def after_create_session(self, session, coord):
        self.first_step = session.run(self._global_step)
        if self._scaling is not None:
            self.skipped, self.scale = session.run(self._scaling)
        self._start = time.time()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._fetches)

    def after_run(self, run_context, run_values):
        self.runs += 1
        self.losses = run_values.results
        if self._scaling is not None:
            self._say_if_skipped(run_context.session)

    def _say_if_skipped(self, session):
        # Read after the step: a fetch of the step may see it before.
        skipped, self.scale = session.run(self._scaling)
        if skipped > self.skipped:
            print(
                "%s: step %d skipped: its float16 gradients were not finite; "
                "the loss scale is now %g (%d step(s) skipped in all)"
                % (
                    datetime.datetime.now(),
                    session.run(self._global_step),
                    self.scale,
                    skipped,
                ),
                flush=True,
            )
        self.skipped = skipped

    def end(self, session):
        self.wall_secs = time.time() - self._start
        self.last_step = session.run(self._global_step)


def print_closing_report(
    hook, examples_per_step, train_dir, next_commands, notes=()
):
    """Prints `closing_report` if the run trained a step, or the job went
    on during it (a ps cluster's other workers ran every step)."""
    if hook.runs or hook.last_step != hook.first_step:
        print(
            closing_report(
                hook, examples_per_step, train_dir, next_commands, notes
            ),
            flush=True,
        )


def closing_report(hook, examples_per_step, train_dir, next_commands, notes=()):
    """The report, one line per fact, from a finished run's `RunReportHook`;
    train_dir None on a cluster's other workers, which write no checkpoints.
    """
    secs = max(hook.wall_secs, 1e-9)
    losses = ", ".join(
        "%s %.3f" % (name.replace("_", " "), hook.losses[name])
        for name in ("cross_entropy", "total_loss")
        if name in hook.losses
    )
    lines = [
        "Trained %d step(s) in this run, from step %d to step %d, in %s "
        "(%.1f examples/sec on average)."
        % (
            hook.runs,
            hook.first_step,
            hook.last_step,
            _duration(secs),
            hook.runs * examples_per_step / secs,
        ),
        *(["Final loss (the last batch's): %s." % losses] if losses else []),
        *_skipped_line(hook),
        *notes,
    ]
    if train_dir is None:
        return "\n".join(
            lines
            + [
                "Checkpoints and event logs: the chief's (worker 0's) "
                "--train_dir."
            ]
        )
    lines += [
        "Checkpoints and event logs: %s (newest: %s)."
        % (train_dir, checkpoints.latest_checkpoint(train_dir)),
        "Next:",
    ]
    return "\n".join(lines + ["  " + each for each in next_commands])


def _skipped_line(hook):
    if hook.skipped is None:
        return []
    return [
        "Dynamic loss scaling skipped %d step(s) in all (non-finite float16 "
        "gradients); the loss scale is now %g." % (hook.skipped, hook.scale)
    ]


def _duration(secs):
    """'1 h 02 min', '3 min 05 s' or '12.3 s'."""
    if secs < 60:
        return "%.1f s" % secs
    minutes, secs = divmod(int(round(secs)), 60)
    if minutes < 60:
        return "%d min %02d s" % (minutes, secs)
    return "%d h %02d min" % divmod(minutes, 60)
