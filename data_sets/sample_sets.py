"""The data's fingerprint, and the built-in sample sets (--fake_data).

A data set's `Data` names it and fingerprints its training files: 'NAME
SIZE HASH', where HASH covers the file's first and last bytes: cheap at
every start, and path-free, so a copied or moved data folder is the same
data. A train_dir records it, and refuses a run on other data.

A sample set is written only into an empty folder or one that a sample set
marked before (a marker file beside the records), so that it never replaces
real data, and any run that trains or evaluates on a marked folder says so.
"""

import hashlib
import os
from typing import NamedTuple

from multigpu import folders

# Bytes read at each end of a file for its fingerprint.
ENDS_BYTES = 1 << 16
# Hex digits kept of a file's hash.
HASH_DIGITS = 16

# The file that marks a folder as holding a generated sample set.
MARKER_NAME = "SAMPLE_SET.txt"
MARKER_TEXT = (
    "This folder holds a small generated sample set (written by --fake_data), "
    "not the real data set. Runs that use it say so.\n"
)


class Data(NamedTuple):
    """The data of a run, as its train_dir records it.

    description: str, what it is, e.g. 'the CIFAR-10 sample set' or
      'CIFAR-10'.
    files: tuple of str, one 'NAME SIZE HASH' line per training file.
    """

    description: str
    files: tuple

    def text(self):
        """The record's content: the description, then the files."""
        return "".join(line + "\n" for line in (self.description, *self.files))

    def summary(self):
        """'DESCRIPTION, N file(s), sha256 DIGEST', what workers compare."""
        return "%s, %d file(s), sha256 %s" % (
            self.description,
            len(self.files),
            digest(self.files),
        )


def fingerprint(paths):
    """'NAME SIZE HASH' of each file of paths (existing files): its name,
    size and ends' hash, a tuple of str in the order of paths."""
    return tuple(_file_line(path) for path in paths)


def _file_line(path):
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(ENDS_BYTES))
        f.seek(max(0, size - ENDS_BYTES))
        digest.update(f.read(ENDS_BYTES))
    return "%s %d %s" % (
        os.path.basename(path),
        size,
        digest.hexdigest()[:HASH_DIGITS],
    )


def digest(files):
    """A short hash of a `Data`'s files, to recognise a known data set."""
    text = "".join(line + "\n" for line in files)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_DIGITS]


def files_to_write(folder, names, is_unmarked_sample_set=None):
    """Marks folder (created if missing) as a sample set's and returns the
    names of the sample set's files (names) it does not hold yet.

    A folder that holds files but no marker holds other data, which the
    sample set must not replace: ValueError naming the files, unless it
    holds exactly `names` and is_unmarked_sample_set(folder) says they are
    a sample set written before sample sets were marked (it is marked then).
    """
    present = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    if (
        present == sorted(names)
        and is_unmarked_sample_set
        and is_unmarked_sample_set(folder)
    ):
        print("marking %s as a sample set (written unmarked)" % folder)
        present.append(MARKER_NAME)
    if present and MARKER_NAME not in present:
        raise ValueError(
            "--fake_data refused: %s holds %d file(s) that are not a sample "
            "set (%s); the sample set is written only into an empty folder; "
            "pass another --data_dir"
            % (folder, len(present), folders.listing(present))
        )
    missing = [
        name for name in names if not os.path.isfile(os.path.join(folder, name))
    ]
    if missing or not is_sample_set(folder):
        # Else nothing is written: a read-only copy is read as it is.
        os.makedirs(folder, exist_ok=True)
        # The marker comes first: a cluster's other tasks, writing the same
        # set at the same time, then find a marked folder, not someone's
        # files.
        with open(os.path.join(folder, MARKER_NAME), "w") as f:
            f.write(MARKER_TEXT)
    return missing


def unmark(folder):
    """Removes folder's marker, once real data replaced the sample set."""
    marker = os.path.join(folder, MARKER_NAME)
    if os.path.isfile(marker):
        os.remove(marker)


def is_sample_set(folder, train_files=(), known_digest=None):
    """bool, whether folder holds a sample set: marked, or known by content.

    Args:
      folder: str, the folder of the record files.
      train_files: strs, the paths of the training files; with
        known_digest (str, their `digest` as the sample set is written),
        an unmarked copy of the set (an older one, or one copied from a
        read-only disk) is known too.
    """
    if os.path.isfile(os.path.join(folder, MARKER_NAME)):
        return True
    if not train_files or not all(map(os.path.isfile, train_files)):
        return False
    return digest(fingerprint(train_files)) == known_digest


def say_if_sample_set(folder, data_set_name, train_files=(), known_digest=None):
    """Prints one line when folder (the record files a run reads) holds a
    sample set, not data_set_name (e.g. 'CIFAR-10'); True if it does.
    train_files, known_digest: as `is_sample_set`."""
    if not is_sample_set(folder, train_files, known_digest):
        return False
    print(
        "NOTE: %s holds the built-in sample set (generated by --fake_data), "
        "not %s; its results say nothing about %s"
        % (folder, data_set_name, data_set_name),
        flush=True,
    )
    return True
