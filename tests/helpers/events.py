"""Reading event files: their scalars and histograms, their runs' steps."""

import glob
import os


def read_events(logdir):
    """Loads every scalar and histogram of the event files in logdir.

    Returns:
      A reloaded TensorBoard `EventAccumulator`: `.Tags()`,
      `.Scalars(tag)`, `.Histograms(tag)`.
    """
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(
        str(logdir),
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.HISTOGRAMS: 0,
        },
    )
    events.Reload()
    return events


def run_event_files(logdir):
    """The event files of logdir, one per run, oldest first."""
    files = glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))
    # events.out.tfevents.SECONDS.HOST: a run's start time.
    return sorted(files, key=lambda f: int(os.path.basename(f).split(".")[3]))


def summary_steps(event_file):
    """The steps at which a run wrote summaries, read as TensorBoard does.

    TensorBoard's loader stops quietly at a record cut short by a kill.
    """
    from tensorboard.backend.event_processing import event_file_loader

    loader = event_file_loader.LegacyEventFileLoader(event_file)
    return [e.step for e in loader.Load() if e.summary.value]
