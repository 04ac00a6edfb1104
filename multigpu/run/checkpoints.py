"""Checkpoints: naming them and finding the newest one that reads."""

import os
import re
import sys

import tensorflow as tf

from multigpu import errors

# Checkpoints are train_dir/model.ckpt-STEP (TensorFlow's default name).
CHECKPOINT_BASENAME = "model.ckpt"


# A checkpoint's index file: PREFIX-STEP.index, e.g. model.ckpt-1000.index.
_CHECKPOINT_INDEX = re.compile(r"^(.+-([0-9]+))\.index$")


def newest_valid_checkpoint(checkpoint_dir):
    """Returns the newest checkpoint of checkpoint_dir that reads in full.

    TensorFlow itself restores the checkpoint that the `checkpoint` state
    file names: if that checkpoint's files are gone or damaged the restore
    fails, and if the state file is garbage training starts again from step
    0 without a word. Here the named checkpoint is tried first, then every
    PREFIX-STEP checkpoint of the folder, highest step first. Each is read
    in full (every tensor, checksums checked); one that does not read is
    skipped with a warning naming it and why.

    Args:
      checkpoint_dir: str, the folder of the checkpoints (--train_dir).

    Returns:
      str, the checkpoint's path prefix, e.g. '/tmp/train/model.ckpt-1000';
      None when the folder holds no checkpoint at all.

    Raises:
      errors.TrainingError: the folder holds checkpoints, but none of them
        reads.
    """
    candidates = _checkpoint_candidates(checkpoint_dir)
    for checkpoint in candidates:
        error = _read_error(checkpoint)
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
            "none of the %d checkpoint(s) in %s reads (the newest is %s); "
            "move them away to train from step 0"
            % (len(candidates), checkpoint_dir, candidates[0])
        )
    return None


def checkpoint_state(checkpoint_dir):
    """The `CheckpointState` of the folder, None if missing or garbage.

    Its paths are resolved inside checkpoint_dir, whatever folder the state
    file names: TensorFlow writes absolute paths, so the state file of a
    copied or moved train_dir names the original's files, which the saver
    would then restore and prune (delete).
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
    """The checkpoint of that name in checkpoint_dir, wherever path points.

    Args:
      checkpoint_dir: str, the folder the state file was found in.
      path: str, a checkpoint's path prefix as a state file lists it, e.g.
        '/old/place/model.ckpt-1000' or 'model.ckpt-1000'.

    Returns:
      str, e.g. 'CHECKPOINT_DIR/model.ckpt-1000'.
    """
    return os.path.join(checkpoint_dir, os.path.basename(path))


def latest_checkpoint(checkpoint_dir):
    """The checkpoint the state file names, inside checkpoint_dir; or None."""
    state = checkpoint_state(checkpoint_dir)
    return state.model_checkpoint_path if state else None


def global_step(checkpoint):
    """int, the `global_step` saved in the checkpoint (path prefix)."""
    reader = tf.train.load_checkpoint(checkpoint)
    return int(reader.get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP))


def _checkpoint_candidates(checkpoint_dir):
    """The checkpoint the state file names, then the others, newest first."""
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
    return named + [
        path
        for _, path in sorted(found, reverse=True)
        if os.path.abspath(path) not in named_paths
    ]


def _read_error(checkpoint):
    """Why the checkpoint does not read in full; None when it does."""
    try:
        reader = tf.train.load_checkpoint(checkpoint)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, IndexError) as e:
        # A short data file raises IndexError ('Read less bytes than
        # requested'); the others raise TensorFlow errors.
        return "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0])
    return None
