"""The lock of a train_dir: one trainer at a time holds the folder.

An exclusive `flock`, which the system releases however the process ends;
a lock file still naming a process once the lock is free is taken over,
with a line saying that process ended without a word (kill -9, or the
kernel out of memory) and what it left.
"""

import contextlib
import fcntl
import os
import re
import socket
import sys

from multigpu import errors, folders
from multigpu.train_dir.train_dirs import (
    LOCK_NAME,
    contents,
    interrupted_writes,
    put_back,
)

# The longest path the suite writes under a train_dir, a failed save's
# part file: model.ckpt-STEP_temp/part-N-of-N.data-N-of-N.tempstateDIGITS.
LONGEST_NAME = 100
_LOCK_CONTENT = re.compile(r"^[0-9]+ \S+\n$")


@contextlib.contextmanager
def owned(train_dir, is_chief=True):
    """Holds train_dir's lock (created if missing) in the block, which it
    gives train_dir's `contents` as found under the lock, for `put_back`
    (None for a folder it created, and for a cluster's other workers).

    An exclusive `flock`, which the system releases however the process
    ends; a file still naming a process once the lock is free is taken
    over. A cluster's other workers (is_chief False) take no lock. InUse
    when another process holds it, ValueError when train_dir cannot be
    created or written.
    """
    if not is_chief:
        yield None
        return
    lock_path = os.path.join(train_dir, LOCK_NAME)
    found = _found(train_dir, lock_path)
    try:
        lock_file, as_found = _taken(train_dir, lock_path, found)
    except ValueError:
        # Refused (in use, a full disk, too long a path): what this run
        # made (the folder, the lock file) goes again.
        if os.path.isdir(train_dir):
            put_back(train_dir, found(contents(train_dir)))
        raise
    try:
        try:
            yield as_found
        except Exception:
            # Whatever failed first (an event file, a checkpoint), the cause
            # is the folder's going.
            if not os.path.isdir(train_dir):
                raise errors.TrainingError(
                    "--train_dir=%s went away during the run (deleted or "
                    "moved, with its checkpoints and event files); the run "
                    "stopped. Start it again, on a folder nothing else "
                    "deletes: it starts from step 0" % train_dir
                ) from None
            raise
        finally:
            _write(lock_file, lock_path, "")
    finally:
        lock_file.close()


def _taken(train_dir, lock_path, found):
    """Takes train_dir's lock: (its open file, train_dir's contents as
    found under it, by found: `_found`)."""
    lock_file = _open_lock_file(train_dir, lock_path)
    try:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InUse(
                "--train_dir=%s is in use by another trainer (%s, see %s); "
                "wait for it to end or stop it, or choose another "
                "--train_dir"
                % (train_dir, _holder(lock_file.read()), lock_path)
            ) from None
        # What another trainer wrote until it let go of the lock is its.
        as_found = found(contents(train_dir))
        left = lock_file.read().strip()
        if left:
            print(
                _ended_without_a_word(train_dir, left),
                file=sys.stderr,
                flush=True,
            )
        _write(
            lock_file,
            lock_path,
            "%d %s\n" % (os.getpid(), socket.gethostname()),
        )
    except BaseException:
        lock_file.close()
        raise
    return lock_file, as_found


def _ended_without_a_word(train_dir, holder):
    """The line of a lock whose holder (its 'PID HOST') ended without
    releasing it: ended by kill -9 or by the kernel (out of memory), which
    leave no line."""
    unfinished = interrupted_writes(train_dir)
    left = "its lock %s" % os.path.join(train_dir, LOCK_NAME)
    if unfinished:
        left += " and the unfinished write(s) %s" % folders.listing(unfinished)
    return (
        "the last run in %s (%s) ended without a word, killed (kill -9, or "
        "the kernel out of memory?): it left %s; taking the lock over"
        % (train_dir, _holder(holder), left)
    )


def _found(train_dir, lock_path):
    """A function of train_dir's contents under the lock: those, but for
    the lock file if this run creates it; None if it creates train_dir."""
    if not os.path.isdir(train_dir):
        return lambda now: None if set(now) <= {LOCK_NAME} else now
    if os.path.lexists(lock_path):
        return lambda now: now
    return lambda now: {k: v for k, v in now.items() if k != LOCK_NAME}


class InUse(ValueError):
    """train_dir's lock is held by another trainer."""


def _open_lock_file(train_dir, path):
    folders.make_folder(train_dir, "train_dir")
    length = len(os.path.abspath(train_dir))
    path_max = os.pathconf(train_dir, "PC_PATH_MAX")
    if length + LONGEST_NAME > path_max:
        raise ValueError(
            "--train_dir is %d characters long (as an absolute path); the "
            "files the trainers write in it need up to %d more, past this "
            "system's limit of %d for a path; choose a shorter --train_dir"
            % (length, LONGEST_NAME, path_max)
        )
    try:
        # Never through a link: the file written is the train_dir's own.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise ValueError(
                "--train_dir=%s cannot be used: %s is a link (to %s), and "
                "the trainers write through no link; remove the link"
                % (train_dir, path, os.readlink(path))
            ) from None
        raise ValueError(
            "--train_dir=%s cannot be used: %s" % (train_dir, e.strerror)
        ) from None
    lock_file = os.fdopen(fd, "r+")
    content = lock_file.read()
    lock_file.seek(0)
    if content and not _LOCK_CONTENT.match(content):
        lock_file.close()
        raise ValueError(
            "--train_dir=%s cannot be used: %s holds %d byte(s) the "
            "trainers do not write (expected 'PID HOST' or nothing); move "
            "it away" % (train_dir, path, len(content.encode()))
        )
    return lock_file


def _holder(content):
    fields = content.split()
    if len(fields) != 2:
        return "a process that has not yet said which"
    return "pid %s on host %s" % tuple(fields)


def _write(lock_file, path, content):
    """Makes content the whole lock file; ValueError when the write fails.

    Unbuffered, so that a failed write fails here, not again at close.
    """
    fd = lock_file.fileno()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, content.encode(), 0)
    except OSError as e:
        raise ValueError(
            "%s; free space on its disk, then run again"
            % folders.not_written(path, e)
        ) from None
