"""Reading the scalars and histograms of event files."""


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
