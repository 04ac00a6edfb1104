"""Preemption in a cluster of workers only: one agreed step, one checkpoint.

A scheduler preempts one worker with SIGTERM (a user stops one with
Ctrl-C); the others cannot see that signal. Each worker's step carries one
more collective: a float32 [num_workers] vector, zero but for this worker's
place, which holds the number of the signal it received (0 while none
came), summed over the workers (`collectives.stop_signals`; the update waits
for it, as for the step's other collectives). Every worker gets the same
sum from the same step, so every worker stops after that step, the chief's
checkpoint saver writes it (its `end`), and each process exits with one
line naming the worker(s) and the signal, with the shell's exit status of
that signal: 128 + N, which schedulers such as Kubeflow's (restart policy
`ExitCode`) treat as a retryable failure. A signal that comes while a step
runs is sent with the next step, so the checkpoint is at most one step
after the one in flight when the signal came.

As `tf.distribute.experimental.PreemptionCheckpointHandler` does for
MultiWorkerMirroredStrategy, but without the coordination service, which
this graph mode does not start (docs/cluster.md).
"""

import signal

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.graph import collectives
from multigpu.run import interrupts
from multigpu.train_dir import checkpoints


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Sends this worker's signal with each step; stops on anyone's.

    Give it the run's `interrupts.InterruptHook`, made with
    stops_itself=False, and place it after that hook; the step's graph
    holds the stop collective (`collectives.stop_signals`).

    Attributes:
      signals: dict {task index: signal number} of the workers that
        received one, empty until every worker stops.
      step: int, the global step every worker stopped at (set by `end`).
    """

    def __init__(self, interrupt):
        self._interrupt = interrupt
        self.signals = {}
        self.step = None

    def begin(self):
        # Built with the step, whose update waits for it.
        self._signal, self._signals = tf.compat.v1.get_collection(
            collectives.STOP_SIGNALS
        )
        self._global_step = tf.compat.v1.train.get_global_step()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(
            self._signals,
            feed_dict={self._signal: float(self._interrupt.signum or 0)},
        )

    def after_run(self, run_context, run_values):
        received = np.flatnonzero(run_values.results)
        if received.size:
            self.signals = {
                int(i): int(run_values.results[i]) for i in received
            }
            run_context.request_stop()

    def end(self, session):
        self.step = int(session.run(self._global_step))


def interrupted(hook, train_dir, is_chief):
    """The `errors.Interrupted` of every worker after an agreed stop.

    Args:
      hook: the run's `PreemptionHook`, after its session ended with
        signals.
      train_dir: str, where the chief saved the step reached.
      is_chief: bool, whether this process saved it.

    Returns:
      `errors.Interrupted` whose message names each worker that received a
      signal and the checkpoint, with the exit status of the first such
      worker's signal.
    """
    received = ", ".join(
        "worker task %d got %s" % (index, signal.Signals(signum).name)
        for index, signum in sorted(hook.signals.items())
    )
    if is_chief:
        saved = "saved %s" % checkpoints.latest_checkpoint(train_dir)
    else:
        saved = "the chief (worker task 0) saved the checkpoint of step %d" % (
            hook.step
        )
    first = hook.signals[min(hook.signals)]
    return errors.Interrupted(
        "%s: every worker stopped at step %d; %s; run the same commands on "
        "every worker to resume" % (received, hook.step, saved),
        interrupts.SHELL_SIGNAL_BASE + first,
    )
