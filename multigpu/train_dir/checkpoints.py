"""Checkpoints: naming them, reading them, pruning them, finding the newest.

A path is a name, never a pattern: TensorFlow's checkpoint reader and its
saver's pruning match `*`, `?`, `[...]` and `\\` in a path, so that a
train_dir 'runs/a[1]' would read and delete the files of 'runs/a1'.
"""

import contextlib
import os
import re
import sys

import tensorflow as tf

from multigpu import errors
from multigpu.graph import summaries

# Checkpoints are train_dir/model.ckpt-STEP (TensorFlow's default name).
CHECKPOINT_BASENAME = "model.ckpt"
# A checkpoint's index file: PREFIX-STEP.index, e.g. model.ckpt-1000.index.
_CHECKPOINT_INDEX = re.compile(r"^(.+-([0-9]+))\.index$")
# The characters TensorFlow's file pattern matching reads as a pattern.
_PATTERN_CHARACTERS = re.compile(r"[*?\[\\]")
_OWN_CHECKPOINT = re.compile(r"^%s-[0-9]+$" % re.escape(CHECKPOINT_BASENAME))
# Where Linux names an open file descriptor as a path.
_FD_FOLDER = "/proc/self/fd"


def newest_valid_checkpoint(checkpoint_dir):
    """The path prefix of the newest checkpoint of checkpoint_dir that
    reads in full; None when it holds none; TrainingError when none reads.

    TensorFlow restores the checkpoint the state file names: if its files
    are damaged the restore fails, and if the state file is garbage
    training starts from step 0 without a word. Here the named checkpoint
    is tried first, then the others, highest step first, each read in full
    (checksums checked).
    """
    state = checkpoint_state(checkpoint_dir)
    named = [state.model_checkpoint_path] if state else []
    state_file = os.path.join(checkpoint_dir, "checkpoint")
    if not named and os.path.exists(state_file):
        print(
            "WARNING: %s names no checkpoint; looking for the newest one"
            % state_file,
            file=sys.stderr,
        )
    found = []
    if os.path.isdir(checkpoint_dir):
        for name in os.listdir(checkpoint_dir):
            match = _CHECKPOINT_INDEX.match(name)
            if match:
                path = os.path.join(checkpoint_dir, match.group(1))
                found.append((int(match.group(2)), path))
    named_paths = {os.path.abspath(p) for p in named}
    candidates = named + [
        path
        for _, path in sorted(found, reverse=True)
        if os.path.abspath(path) not in named_paths
    ]
    for checkpoint in candidates:
        error = read_error(checkpoint)
        if error is None:
            return checkpoint
        print(
            "WARNING: skipping checkpoint %s, it does not read (%s)"
            % (checkpoint, error),
            file=sys.stderr,
            flush=True,
        )
    if candidates:
        raise errors.TrainingError(
            "none of the %d checkpoint(s) in %s reads (the newest is %s): "
            "nothing to resume from or to score; put back whole copies, or "
            "move them out of the folder, and a trainer starts over from "
            "step 0" % (len(candidates), checkpoint_dir, candidates[0])
        )
    return None


def checkpoint_state(checkpoint_dir):
    """The `CheckpointState` of the folder, None if missing or garbage.

    Its paths are resolved inside checkpoint_dir: TensorFlow writes absolute
    paths, so a moved train_dir's state file names the original's files,
    which the saver would restore and prune.
    """
    try:
        state = tf.train.get_checkpoint_state(checkpoint_dir)
    except ValueError:
        # TensorFlow returns None for a file it cannot parse, but raises
        # for an empty one or one of bytes that are not text.
        return None
    if state is None:
        return None
    resolved = type(state)()
    resolved.CopyFrom(state)
    resolved.model_checkpoint_path = in_dir(
        checkpoint_dir, state.model_checkpoint_path
    )
    del resolved.all_model_checkpoint_paths[:]
    resolved.all_model_checkpoint_paths.extend(
        in_dir(checkpoint_dir, path)
        for path in state.all_model_checkpoint_paths
    )
    return resolved


def in_dir(checkpoint_dir, path):
    return os.path.join(checkpoint_dir, os.path.basename(path))


def latest_checkpoint(checkpoint_dir):
    """The checkpoint the state file names, inside checkpoint_dir; or None."""
    state = checkpoint_state(checkpoint_dir)
    return state.model_checkpoint_path if state else None


def global_step(checkpoint):
    with reading(checkpoint) as reader:
        return int(reader.get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP))


@contextlib.contextmanager
def reading(checkpoint):
    """A `CheckpointReader` of the checkpoint, its path taken literally,
    valid inside the block (it opens data files as it reads)."""
    with literal_path(checkpoint) as path:
        yield tf.train.load_checkpoint(path)


@contextlib.contextmanager
def literal_path(path):
    """path, or in the block another name of it that holds no pattern.

    TensorFlow matches PREFIX.index as a pattern: a folder named with a
    pattern character is reached through an open descriptor instead, e.g.
    'runs/a[1]/model.ckpt-10' as '/proc/self/fd/7/model.ckpt-10'.
    """
    folder, name = os.path.split(path)
    if not _PATTERN_CHARACTERS.search(folder) or not os.path.isdir(_FD_FOLDER):
        yield path
        return
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield path  # TensorFlow says it is missing, as for any other path.
        return
    try:
        yield os.path.join(_FD_FOLDER, str(descriptor), name)
    finally:
        os.close(descriptor)


def remove_checkpoint(checkpoint):
    """Deletes the files of one of the saver's checkpoints, by exact name."""
    folder, prefix = os.path.split(checkpoint)
    if not _OWN_CHECKPOINT.match(prefix):
        return
    files = re.compile(
        r"^%s(\.index|\.meta|\.data-[0-9]{5}-of-[0-9]{5})$" % re.escape(prefix)
    )
    for name in os.listdir(folder or "."):
        path = os.path.join(folder, name)
        if files.match(name) and not os.path.isdir(path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def refuse_links(checkpoint_dir, step):
    """ValueError when a link has the name of a file of step's checkpoint:
    TensorFlow would write through it, over a file not the train_dir's."""
    prefix = "%s-%d" % (CHECKPOINT_BASENAME, step)
    for name in sorted(os.listdir(checkpoint_dir)):
        path = os.path.join(checkpoint_dir, name)
        if name.startswith((prefix + ".", prefix + "_temp")) and os.path.islink(
            path
        ):
            raise ValueError(
                "cannot save the checkpoint of step %d: %s is a link (to %s),"
                " and the trainers write through no link; remove it"
                % (step, path, os.readlink(path))
            )


def saved_name(var):
    """A variable's name without the graph's blocks, as the tutorial saves
    it: 'model/conv1/weights' as 'conv1/weights'."""
    return summaries.without_blocks(var.op.name)


def saved_variables():
    """The graph's global variables by `saved_name`: a Saver's var_list."""
    saved = {}
    for var in tf.compat.v1.global_variables():
        name = saved_name(var)
        if name in saved:
            raise ValueError(
                "the variables %s and %s would both be saved as %s (the "
                "checkpoints' names leave out the blocks %s/), so one would "
                "be lost; rename one of them, e.g. by another variable scope"
                % (
                    saved[name].op.name,
                    var.op.name,
                    name,
                    "/, ".join(summaries.SAVED_WITHOUT),
                )
            )
        saved[name] = var
    return saved


class ExactSaver(tf.compat.v1.train.Saver):
    """TensorFlow's saver, pruning by exact file names, not patterns."""

    def _MaybeDeleteOldCheckpoints(self, meta_graph_suffix="meta"):
        # The saver lists the checkpoints past max_to_keep here; it keeps
        # none every N hours (keep_checkpoint_every_n_hours is not used).
        while self._checkpoints_to_be_deleted:
            checkpoint, _ = self._checkpoints_to_be_deleted.pop(0)
            remove_checkpoint(checkpoint)

    def recover_checkpoints(self, state):
        """Takes the checkpoints state (of `checkpoint_state`) lists, to
        prune them in turn."""
        listed = []
        for checkpoint in state.all_model_checkpoint_paths:
            with contextlib.suppress(OSError):
                listed.append(
                    (checkpoint, os.stat(checkpoint + ".index").st_mtime)
                )
        self.set_last_checkpoints_with_time(listed)


def read_error(checkpoint):
    """Why the checkpoint does not read in full; None when it does."""
    try:
        with reading(checkpoint) as reader:
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as e:
        # A short data file raises IndexError ('Read less bytes than
        # requested'); the others raise TensorFlow errors.
        return "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0])
    return None
