"""The folders that flags name: made, or a one-line error saying why not."""

import contextlib
import os
import shutil

# How many files an error message names before 'and N more'.
NAMED_FILES = 5


def make_folder(path, flag):
    """Creates the folder path, the value of --flag, if it is missing;
    ValueError if it is or is under a file, or cannot be written."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError("--%s=%s is a file, not a folder" % (flag, path))
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(
            "--%s=%s is under %s, which is a file, not a folder"
            % (flag, path, parent)
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ValueError(
            "--%s=%s cannot be created: %s" % (flag, path, e.strerror)
        ) from None
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        raise ValueError(
            "--%s=%s is on a read-only file system; pass a folder this user "
            "can write" % (flag, path)
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError("--%s=%s is not writable by this user" % (flag, path))


def why_unwritable(path):
    """Why this process could not write files under path (e.g. 'is on a
    read-only file system'), or None; the nearest existing folder is looked
    at, and nothing is created."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return "is under %s, which is a file" % existing
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        return "is on a read-only file system"
    if not os.access(existing, os.W_OK | os.X_OK):
        return "is not writable by this user"
    return None


def listing(names):
    """'a, b, c' for an error message, the first NAMED_FILES of names."""
    listed = ", ".join(names[:NAMED_FILES])
    if len(names) > NAMED_FILES:
        listed += " and %d more" % (len(names) - NAMED_FILES)
    return listed


@contextlib.contextmanager
def written_aside(filename):
    """Yields 'FILENAME.PID.tmp' to write in full; renames it when done.

    A crash or a full disk never leaves a short file under filename, and
    processes writing the same file at once (cluster tasks) do not mix.
    Whatever fails, the part written is removed; an OSError is a ValueError.
    """
    part = "%s.%d.tmp" % (filename, os.getpid())
    try:
        yield part
        os.replace(part, filename)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.remove(part)
        if isinstance(e, OSError):
            raise ValueError(
                "%s; nothing half-written is left" % not_written(filename, e)
            ) from None
        raise


def not_written(filename, error):
    """'could not write FILE (REASON; M MB free on its disk)'."""
    return "could not write %s (%s; %.1f MB free on its disk)" % (
        filename,
        error.strerror or str(error),
        shutil.disk_usage(os.path.dirname(filename) or ".").free / 2**20,
    )
