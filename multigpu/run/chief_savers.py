"""The chief's hooks: the step counter, the summaries (how often), the
checkpoint saver and the event file's watcher."""

import tensorflow as tf

from multigpu.run import loop_hooks
from multigpu.train_dir import checkpoints

# Steps between summaries by default, as the tutorial's trainers write them.
SUMMARY_STEPS = 100
# The points a chart of a shorter run has at least, by default.
SUMMARY_POINTS = 20


def summary_steps(max_steps):
    """The default steps between summaries: a short run's charts have 20
    points.

    Args:
      max_steps: int or None, the step the run stops at.

    Returns:
      int, SUMMARY_STEPS, or max_steps / SUMMARY_POINTS when that is less
      (at least 1).
    """
    if max_steps is None:
        return SUMMARY_STEPS
    return max(1, min(SUMMARY_STEPS, max_steps // SUMMARY_POINTS))


def chief_hooks(train_dir, scaffold, saving, watched, histograms):
    """The chief's step counter, summary writer, checkpoint saver and event
    file watcher.

    Args:
      train_dir: str.
      scaffold: the session's `Scaffold`.
      saving: (int, int or None, int or None): save_checkpoint_steps, the
        steps between checkpoints; save_summaries_steps, the steps between
        summaries (also written at the first step and at max_steps; 0 for
        `summary_steps(max_steps)`, and the histograms every SUMMARY_STEPS;
        None writes no summaries at all, not even the step counter's
        global_step/sec); max_steps.
      watched: the `_Watched` hooks; the saver tells its `saves` when it
        writes.
      histograms: string scalar, the merged histograms, or None.
    """
    save_checkpoint_steps, save_summaries_steps, max_steps = saving
    hooks = []
    if save_summaries_steps is not None:
        every = save_summaries_steps or summary_steps(max_steps)
        hooks += [
            tf.compat.v1.train.StepCounterHook(
                every_n_steps=every, output_dir=train_dir
            ),
            loop_hooks.SummarySaverHook(
                last_step=max_steps,
                histograms=histograms,
                histogram_steps=save_summaries_steps or SUMMARY_STEPS,
                save_steps=every,
                output_dir=train_dir,
                scaffold=scaffold,
            ),
        ]
    hooks.append(
        loop_hooks.CheckpointSaverHook(
            train_dir,
            save_steps=save_checkpoint_steps,
            scaffold=scaffold,
            checkpoint_basename=checkpoints.CHECKPOINT_BASENAME,
            listeners=[watched.saves],
        )
    )
    return [*hooks, watched.events]
