"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT (`errors.SIGNALS`): finish the step,
save it, say so and exit 128 + the signal's number (130, 143, 129, 131).

The first signal only sets a flag: the step running ends, the session
stops, the chief's checkpoint saver writes the step reached (its `end`),
and `run_training` raises `errors.Interrupted`. A second signal ends the
process at once, even mid-save (the state file still names the newest
complete checkpoint). A signal before the run's handlers are set is held
(`hold`) and taken as they are set: the run stops before step 1. SIGHUP
(the terminal closed) and SIGQUIT (Ctrl-\\) are taken as SIGTERM is: their
default ends a process with no line and the steps since its last save lost.

In a cluster of workers only, the others cannot see one worker's signal:
each step carries one more collective (`collectives.stop_signals`), a
float32 [num_workers] vector, zero but for this worker's signal number,
summed over the workers. Every worker gets the same sum from the same step
and stops after it; each exits 128 + N, which schedulers such as
Kubeflow's (restart policy `ExitCode`) retry. As
`tf.distribute.experimental.PreemptionCheckpointHandler` does, but without
the coordination service, which this graph mode does not start.
"""

import contextlib
import signal

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.graph import collectives
from multigpu.train_dir import checkpoints


class InterruptHook(tf.compat.v1.train.SessionRunHook):
    """Asks the session to stop after one of SIGNALS; then knows the step.

    Install it with `installed()` in the main thread (Python runs signal
    handlers there only). With stops_itself=False it only remembers the
    signal, for the `PreemptionHook`.
    """

    def __init__(self, stops_itself=True):
        self.signum = None
        self.step = None
        self._stops_itself = stops_itself

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def handle(self, signum, frame):
        del frame
        self.signum = signum
        for other in errors.SIGNALS:
            signal.signal(other, signal.SIG_DFL)

    def after_create_session(self, session, coord):
        # A signal during the restore: stop before the first step.
        if self._stops_itself and self.signum is not None:
            coord.request_stop()

    def after_run(self, run_context, run_values):
        if self._stops_itself and self.signum is not None:
            run_context.request_stop()

    def end(self, session):
        self.step = int(session.run(self._global_step))

    @contextlib.contextmanager
    def installed(self, then_hold=False):
        """Sets the hook's handler of SIGNALS, the previous ones on exit;
        with then_hold, and no signal yet, `hold`'s instead: the run goes on
        until its loop sets them again."""
        previous = {}
        for signum in errors.SIGNALS:
            previous[signum] = signal.signal(signum, self.handle)
        # Taken once the handler is set: a signal meanwhile is not lost.
        before, held = _HELD.take()
        previous.update(before)
        if held is not None:
            self.handle(held, None)
        try:
            yield self
        finally:
            if then_hold and self.signum is None:
                _HELD.before.update(previous)
                previous = dict.fromkeys(previous, _hold_signal)
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def exit_code(self):
        return errors.SHELL_SIGNAL_BASE + self.signum

    def signal_name(self):
        return signal.Signals(self.signum).name


def hold():
    """Holds one of SIGNALS from now until a run's handlers are set, which a
    script does before it reads its data: else such a signal ends it with
    no line (SIGTERM) or outside the training loop (SIGINT)."""
    for signum in errors.SIGNALS:
        _HELD.before[signum] = signal.signal(signum, _hold_signal)


class _Held:
    """What `hold` keeps: the handlers it replaced, the signal held."""

    def __init__(self):
        self.before = {}
        self.signum = None

    def take(self):
        taken = dict(self.before), self.signum
        self.before.clear()
        self.signum = None
        return taken


_HELD = _Held()


def _hold_signal(signum, frame):
    del frame
    _HELD.signum = signum
    for other in errors.SIGNALS:
        signal.signal(other, signal.SIG_DFL)


def interrupted(hook, train_dir, task, runs):
    """The `errors.Interrupted` of a run the hook stopped."""
    if task.is_chief and runs == 0:
        # The run takes back what it wrote in train_dir (`put_back`).
        return errors.Interrupted(
            "interrupted (%s) before step 1; nothing was trained, and what "
            "the run wrote in %s is removed; run the same command to start"
            % (hook.signal_name(), train_dir),
            hook.exit_code(),
        )
    if not task.is_chief and task.kind.agreed_stop:
        # The job's last step ended before the signal went with a step.
        return errors.Interrupted(
            "worker task %d got %s in the job's last step: every worker "
            "finished at global step %d, whose checkpoint the chief (worker "
            "task 0) saved; nothing more to save"
            % (task.task_index, hook.signal_name(), hook.step),
            hook.exit_code(),
        )
    if not task.is_chief:
        # SyncReplicasOptimizer takes any worker's gradients: each global
        # step still averages replicas_to_aggregate, from the workers left.
        sync = (
            ", each global step averaging --replicas_to_aggregate=%d "
            "gradients of the workers left" % task.replicas_to_aggregate
            if task.kind.sync
            else ""
        )
        return errors.Interrupted(
            "worker task %d interrupted (%s) at global step %d and left the "
            "cluster; the chief (worker task 0) and the other workers train "
            "on without it%s, and the chief saves the checkpoints; run the "
            "same command to rejoin"
            % (task.task_index, hook.signal_name(), hook.step, sync),
            hook.exit_code(),
        )
    # A ps chief's saver writes the global step as the run ends, which the
    # other workers may have moved past the step the hook read.
    saved = checkpoints.latest_checkpoint(train_dir)
    return errors.Interrupted(
        "interrupted (%s) at step %d; saved %s; run the same command to "
        "resume"
        % (
            hook.signal_name(),
            checkpoints.global_step(saved) if saved else hook.step,
            saved,
        ),
        hook.exit_code(),
    )


class PreemptionHook(tf.compat.v1.train.SessionRunHook):
    """Sends this worker's signal with each step; stops on anyone's.

    Give it the run's `InterruptHook` made with stops_itself=False, and
    place it after that hook. signals: {task index: signal number}.
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


def preempted(hook, train_dir, is_chief):
    """The `errors.Interrupted` of every worker after an agreed stop, with
    the exit status of the first signal."""
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
        errors.SHELL_SIGNAL_BASE + first,
    )
