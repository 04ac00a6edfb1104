"""What a train_dir was trained on: its record, and a run on other data refused.

A train_dir's data record (`train_dirs.DATA_RECORD`) holds the text of the
run's `Data` (the data sets' fingerprint of their training files): one line
naming the data, then one line per training file.
"""

import os

from multigpu import folders
from multigpu.train_dir import checkpoints, train_dirs

# The name the data go by among the settings the workers of a cluster
# compare before step 1 (`agreement.difference` names it as the flag):
# each worker reads its own --data_dir, and all must hold the same files.
SETTING = "data_dir"


def with_setting(settings, data):
    """settings (what the workers compare, `agreement.agree`) with the
    `summary` of data (this run's `Data`) as `SETTING`: a new dict, or
    settings itself when either is None (outside a cluster, no data)."""
    if settings is None or data is None:
        return settings
    return dict(settings, **{SETTING: data.summary()})


def recorded_data(train_dir):
    """(description, files) as train_dir's record names its `Data`; None
    when it has no record."""
    try:
        with open(os.path.join(train_dir, train_dirs.DATA_RECORD)) as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return (lines[0], tuple(lines[1:])) if lines else None


def record_data(train_dir, data):
    """Writes the `Data` of the run as train_dir's (an existing folder)
    record, unless it says so already."""
    if recorded_data(train_dir) == data:
        return
    path = os.path.join(train_dir, train_dirs.DATA_RECORD)
    with folders.written_aside(path) as part, open(part, "w") as f:
        f.write(data.text())


def refuse_other_data(train_dir, data, data_dir):
    """Refuses a train_dir trained on other data, before anything is written:
    ValueError, one line naming both and the flags to pass.

    A train_dir with checkpoints but no record (written before the suite
    kept one) takes data (the run's `Data`) as its own, with a line saying
    so. data_dir: str, --data_dir, for the message.
    """
    held = recorded_data(train_dir)
    data_flag = "--data_dir=%s" % data_dir
    record = os.path.join(train_dir, train_dirs.DATA_RECORD)
    if held is None:
        if checkpoints.latest_checkpoint(train_dir) is not None:
            print(
                "--train_dir=%s has no record of its data (written before "
                "the suite kept one); recording %s of %s as its data"
                % (train_dir, data.description, data_flag),
                flush=True,
            )
        return
    if held == data:
        return
    held_description, held_files = held
    if held_description != data.description:
        found = "on %s, not on %s in %s" % (
            held_description,
            data.description,
            data_flag,
        )
    else:
        # The files whose lines differ.
        changed = set(held_files) ^ set(data.files)
        names = {line.split(" ", 1)[0] for line in changed}
        found = "on other files of %s than those in %s (%s %s)" % (
            data.description,
            data_flag,
            folders.listing(sorted(names)),
            "differs" if len(names) == 1 else "differ",
        )
    raise ValueError(
        "--train_dir=%s was trained %s (%s names its files): pass another "
        "--train_dir, or another with --pretrained_model_checkpoint_path=%s "
        "to start from its weights" % (train_dir, found, record, train_dir)
    )


def refuse_other_data_set(train_dir, description, data_dir):
    """Refuses to score train_dir's checkpoints on another data set:
    ValueError, one line naming both.

    For the eval, which reads the test files only: the data set's name
    (description, e.g. 'CIFAR-10') is compared (the sample set is not
    CIFAR-10), not the training files. A train_dir with no record is
    scored as before. data_dir: str, --data_dir, for the message.
    """
    held = recorded_data(train_dir)
    if held is None or held[0] == description:
        return
    record = os.path.join(train_dir, train_dirs.DATA_RECORD)
    raise ValueError(
        "--checkpoint_dir=%s was trained on %s, not on %s in --data_dir=%s "
        "(%s names its files): its scores there would say nothing of it; "
        "pass the --data_dir it was trained on"
        % (train_dir, held[0], description, data_dir, record)
    )
