"""--trace_step: one step traced, for chrome://tracing and TensorBoard.

The trace shows each device's ops on a time line: the towers running side
by side, and where the step waits (the input, the gradient averaging, the
copies between devices).
"""

import collections
import os

import tensorflow as tf
from tensorflow.python.client import timeline


def trace_hooks(trace_step, train_dir):
    """The hooks of --trace_step: [] for 0, else one `TraceHook`."""
    if not trace_step:
        return []
    return [TraceHook(trace_step, train_dir)]


def trace_path(train_dir, step):
    """Where the Chrome trace of a step goes: TRAIN_DIR/trace_step_N.json."""
    return os.path.join(train_dir, "trace_step_%d.json" % step)


class TraceHook(tf.compat.v1.train.SessionRunHook):
    """Traces the run that makes global step `step` (FULL_TRACE).

    Writes the Chrome trace to `trace_path` and the run metadata (as
    'step_N') to the event file of train_dir, for TensorBoard's graph view
    (node compute time and memory), and prints the path and how busy each
    device was during the step.
    """

    def __init__(self, step, train_dir):
        self._step = step
        self._train_dir = train_dir
        self._next_step = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self._next_step = session.run(self._global_step) + 1
        if self._next_step > self._step:
            print(
                "WARNING: --trace_step=%d is behind the run's first step %d; "
                "no step is traced" % (self._step, self._next_step)
            )

    def before_run(self, run_context):
        if self._next_step != self._step:
            return None
        return tf.compat.v1.train.SessionRunArgs(
            None,
            options=tf.compat.v1.RunOptions(
                trace_level=tf.compat.v1.RunOptions.FULL_TRACE
            ),
        )

    def after_run(self, run_context, run_values):
        if self._next_step == self._step:
            self._write(run_values.run_metadata)
        self._next_step += 1

    def end(self, session):
        if self._next_step is not None and self._next_step <= self._step:
            print(
                "WARNING: --trace_step=%d was not reached (the run ended at "
                "step %d); no step is traced"
                % (self._step, self._next_step - 1)
            )

    def _write(self, run_metadata):
        path = trace_path(self._train_dir, self._step)
        os.makedirs(self._train_dir, exist_ok=True)
        try:
            # Never through a link: the file written is the train_dir's own.
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
            )
        except OSError as e:
            raise ValueError(
                "--trace_step=%d: cannot write %s (%s); the trainers write "
                "through no link" % (self._step, path, e.strerror)
            ) from None
        with os.fdopen(fd, "w") as f:
            f.write(
                timeline.Timeline(
                    run_metadata.step_stats
                ).generate_chrome_trace_format()
            )
        writer = tf.compat.v1.summary.FileWriterCache.get(self._train_dir)
        writer.add_run_metadata(
            run_metadata, "step_%d" % self._step, global_step=self._step
        )
        writer.flush()
        shares = busy_shares(run_metadata.step_stats)
        print(
            "Trace of step %d: %s (open in chrome://tracing or "
            "https://ui.perfetto.dev; run metadata 'step_%d' in TensorBoard's "
            "graph view). Busy share of the step: %s"
            % (
                self._step,
                path,
                self._step,
                ", ".join(
                    "%s %.0f%%" % (device, 100 * share)
                    for device, share in shares.items()
                ),
            ),
            flush=True,
        )


def busy_shares(step_stats):
    """How much of a step each device spent running ops.

    Args:
      step_stats: the `StepStats` of a traced run.

    Returns:
      An ordered dict device name -> float in [0, 1]: the time covered by
      at least one of the device's ops over the step's time (first op start
      to last op end, all devices).
    """
    intervals = collections.OrderedDict()
    for dev_stats in step_stats.dev_stats:
        spans = [
            (n.all_start_micros, n.all_start_micros + n.all_end_rel_micros)
            for n in dev_stats.node_stats
        ]
        if spans:
            intervals.setdefault(dev_stats.device, []).extend(spans)
    if not intervals:
        return collections.OrderedDict()
    start = min(s for spans in intervals.values() for s, _ in spans)
    end = max(e for spans in intervals.values() for _, e in spans)
    return collections.OrderedDict(
        (device, _covered(spans) / max(end - start, 1))
        for device, spans in sorted(intervals.items())
    )


def _covered(spans):
    """The length of the union of (start, end) intervals."""
    total, reach = 0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
