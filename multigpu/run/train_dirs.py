"""The train_dir a trainer owns: what the suite writes there, who holds it.

`clear` deletes only the files the suite writes (never the user's notes or
data); `owned` holds an exclusive lock on the folder for the run, so that
two trainers never write the same checkpoints and event file.
"""

import contextlib
import fcntl
import os
import re
import shutil
import socket
import sys

from multigpu import folders

# The lock file of a train_dir: 'PID HOST' while a trainer holds it, empty
# once it is released.
LOCK_NAME = "trainer.lock"

# The files the suite writes in a train_dir: the checkpoint state file,
# checkpoints (model.ckpt-STEP.index, .meta, .data-I-of-N and a failed
# save's model.ckpt-STEP_temp folder), event files, the graph, the lock.
_SUITE_FILE = re.compile(
    r"^(checkpoint|graph\.pbtxt|events\.out\.tfevents\..+|%s|"
    r"model\.ckpt-[0-9]+(\.index|\.meta|\.data-[0-9]+-of-[0-9]+|_temp))$"
    % re.escape(LOCK_NAME)
)


def clear(train_dir, data_dirs=()):
    """Deletes the files the suite wrote in train_dir, and nothing else.

    Args:
      train_dir: str, the folder to clear (it stays, empty of our files).
      data_dirs: strs, the run's data folders, which clearing never touches.

    Raises:
      ValueError: train_dir is, or contains, one of data_dirs; or it holds
        files the suite does not write (named). Nothing is deleted then.
    """
    if not os.path.isdir(train_dir):
        return
    real_train_dir = os.path.realpath(train_dir)
    for data_dir in data_dirs:
        real_data_dir = os.path.realpath(data_dir)
        if os.path.commonpath([real_train_dir, real_data_dir]) == (
            real_train_dir
        ):
            raise ValueError(
                "--clear_train_dir refused: --train_dir=%s is or contains "
                "the data folder %s; nothing was deleted"
                % (train_dir, data_dir)
            )
    names = sorted(os.listdir(train_dir))
    others = [name for name in names if not _SUITE_FILE.match(name)]
    if others:
        raise ValueError(
            "--clear_train_dir refused: %s holds %d file(s) the trainers do "
            "not write (%s); move them away or choose another --train_dir; "
            "nothing was deleted"
            % (train_dir, len(others), folders.listing(others))
        )
    for name in names:
        path = os.path.join(train_dir, name)
        if name == LOCK_NAME:
            continue  # Held by this run.
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


@contextlib.contextmanager
def owned(train_dir, is_chief=True):
    """Holds train_dir's lock in the block: one trainer per train_dir.

    The lock is an exclusive `flock` on train_dir/trainer.lock, which the
    operating system releases when the process ends, however it ends; the
    file says which process holds it. A file still naming a process once
    the lock is free was left by a process that died: it is taken over,
    with a line saying so. Other workers of a cluster take no lock (the
    chief holds it for them), nor does the eval.

    Args:
      train_dir: str, created if missing.
      is_chief: bool, False for a cluster's other workers: no lock.

    Raises:
      ValueError: another process holds the lock (named by pid and host),
        or train_dir cannot be created or written.
    """
    if not is_chief:
        yield
        return
    lock_path = os.path.join(train_dir, LOCK_NAME)
    lock_file = _open_lock_file(train_dir, lock_path)
    try:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                "--train_dir=%s is in use by another trainer (%s, see %s); "
                "wait for it to end or stop it, or choose another "
                "--train_dir"
                % (train_dir, _holder(lock_file.read()), lock_path)
            ) from None
        left = lock_file.read().strip()
        if left:
            print(
                "taking over %s, left by %s, which ended without releasing "
                "it" % (lock_path, _holder(left)),
                file=sys.stderr,
                flush=True,
            )
        _write(lock_file, "%d %s\n" % (os.getpid(), socket.gethostname()))
        try:
            yield
        finally:
            _write(lock_file, "")
    finally:
        lock_file.close()


def _open_lock_file(train_dir, path):
    """The lock file, opened for reading and writing (created if missing)."""
    folders.make_folder(train_dir, "train_dir")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ValueError(
            "--train_dir=%s cannot be used: %s" % (train_dir, e.strerror)
        ) from None
    return os.fdopen(fd, "r+")


def _holder(content):
    """'pid P on host H', from the lock file's 'P H'."""
    fields = content.split()
    if len(fields) != 2:
        return "a process that has not yet said which"
    return "pid %s on host %s" % tuple(fields)


def _write(lock_file, content):
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(content)
    lock_file.flush()
