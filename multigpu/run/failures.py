"""What a failed run says: the one line of each way training can fail."""

import os
import re
import shutil

import tensorflow as tf

from multigpu import errors
from multigpu.distributed import ps
from multigpu.train_dir import checkpoints, train_dirs


def failure(error, watched, task, train_dir, saved=None):
    """The run's `errors.TrainingError` for an error of its session, and
    its cause (or None); (None, None) to raise the error itself.

    watched: the run's `training._Watched` hooks; saved: the checkpoint
    the chief of a lost cluster saved, or None.
    """
    logger, events = watched.logger, watched.events
    if isinstance(error, tf.compat.v1.train.NanLossDuringTrainingError):
        return _diverged(logger.step, "loss is NaN", train_dir), error
    if isinstance(error, tf.errors.InvalidArgumentError):
        # On a summary step a NaN or infinite histogram fails the step
        # before the NaN hook sees the loss.
        found = _NON_FINITE_HISTOGRAM.search(error.message)
        if found is None:
            return None, None
        return _diverged(logger.step + 1, found.group(0), train_dir), error
    # A peer that ended before step 1 cancels the collectives of the
    # start-up copy of the chief's values in every other worker of a
    # cluster of workers only.
    cancelled = isinstance(error, tf.errors.CancelledError) and not logger.runs
    if lost_cluster(error) or cancelled:
        return _lost_cluster(error, logger.runs, task, saved), error
    events.cut_back()
    if isinstance(error, tf.errors.OpError):
        if watched.saves.step is not None:
            return save_failed(watched.saves.step, train_dir, error), None
        return write_failed(train_dir, error) or out_of_memory(error), None
    failed = events.failure(error)
    if failed is None:
        return None, None
    return errors.TrainingError(
        "%s; stopped at step %d, the newest complete checkpoint is %s"
        % (failed, logger.step, checkpoints.latest_checkpoint(train_dir))
    ), None


def lost_cluster(error):
    """Whether error is the session's for a peer it lost."""
    return isinstance(
        error, (tf.errors.DeadlineExceededError, tf.errors.UnavailableError)
    )


def _lost_cluster(error, runs, task, saved):
    line = "lost the cluster after %d local steps (%s): %s" % (
        runs,
        type(error).__name__,
        ps.unreachable_tasks(task.cluster),
    )
    if saved:
        line += "; saved %s; run the same commands on every worker to " % saved
        line += "resume from it"
    else:
        line += task.kind.lost_peer_advice
    return errors.TrainingError(line)


# A file error of TensorFlow: 'PATH; REASON', e.g. '.../graph.pbtxt.tmpHEX;
# No space left on device' (.tmpHEX: a whole file written, then renamed).
_FILE_ERROR = re.compile(
    r"^(\S+?)(\.tmp[0-9a-f]{32})?; ([A-Z][a-z]+(?: [a-z]+)*)$", re.MULTILINE
)


def save_failed(step, train_dir, error):
    """The run's error when the checkpoint of step could not be written."""
    train_dirs.remove_interrupted_writes(train_dir)
    found = _FILE_ERROR.search(error.message)
    if found and found.group(1).endswith(".meta"):
        # The saver writes the graph last: the checkpoint itself is whole.
        return errors.TrainingError(
            "could not write %s, the graph of the checkpoint of step %d (%s);"
            " the checkpoint itself is complete, and a run started once the "
            "cause is fixed resumes from it"
            % (found.group(1), step, _reason(train_dir, error, found))
        )
    return errors.TrainingError(
        "could not write the checkpoint of step %d to %s (%s); %s"
        % (
            step,
            train_dir,
            _reason(train_dir, error, found),
            _resumes_from(train_dir),
        )
    )


def write_failed(train_dir, error):
    """The run's error when a file of train_dir could not be written,
    else None."""
    found = _FILE_ERROR.search(error.message)
    if found is None or os.path.normpath(
        os.path.dirname(found.group(1))
    ) != os.path.normpath(train_dir):
        return None
    train_dirs.remove_interrupted_writes(train_dir)
    return errors.TrainingError(
        "could not write %s (%s); %s"
        % (
            found.group(1),
            _reason(train_dir, error, found),
            _resumes_from(train_dir),
        )
    )


def _reason(train_dir, error, found):
    """'ResourceExhaustedError: No space left on device; 0.3 MB free on
    its disk'."""
    reason = found.group(3) if found else error.message.strip().split("\n")[0]
    return "%s: %s; %.1f MB free on its disk" % (
        type(error).__name__,
        reason,
        shutil.disk_usage(train_dir).free / 2**20,
    )


# TensorFlow's error for an allocation that does not fit.
_OOM = re.compile(
    r"OOM when allocating tensor with shape\[([0-9,]*)\] and type (\w+) on "
    r"\S*?([A-Z]+:[0-9]+)"
)


def out_of_memory(error):
    """The run's error for a tensor too large for its device, else None."""
    found = _OOM.search(error.message)
    if found is None:
        return None
    return errors.TrainingError(
        "out of memory: a %s tensor of shape [%s] does not fit on %s; lower "
        "--batch_size (examples per tower)"
        % (found.group(2), found.group(1), found.group(3))
    )


def _resumes_from(train_dir):
    newest = checkpoints.latest_checkpoint(train_dir)
    if newest is None:
        return (
            "no checkpoint is complete yet: a run started once the cause is "
            "fixed starts from step 0"
        )
    return (
        "the newest complete checkpoint is %s, and a run started once the "
        "cause is fixed resumes from it" % newest
    )


# TensorFlow's error for a histogram summary of NaN or infinite values.
_NON_FINITE_HISTOGRAM = re.compile(
    r"(Nan|Infinity) in (summary )?histogram for: \S+", re.IGNORECASE
)


def _diverged(step, reason, train_dir):
    return errors.TrainingError(
        "the model diverged at step %d (%s); stopped without saving it, the "
        "newest checkpoint is %s"
        % (step, reason, checkpoints.latest_checkpoint(train_dir))
    )
