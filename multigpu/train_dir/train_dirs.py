"""The train_dir a trainer owns: what the suite writes there.

Clearing deletes only the suite's files, never the user's; its records of
the model and the data refuse others. One trainer at a time holds a folder
(`lock`).
"""

import os
import re
import shutil

from multigpu import folders
from multigpu.train_dir import checkpoints

# The lock file: 'PID HOST' while a trainer holds it, empty once released.
LOCK_NAME = "trainer.lock"
# Names the model of the checkpoints: 'NAME\n', as --model names it.
MODEL_RECORD = "model.txt"
# The file that names the data a train_dir was trained on (`record_data`).
DATA_RECORD = "data.txt"
# The id of a ps cluster's job whose chief trains here (`distributed.jobs`).
JOB_RECORD = "job.txt"
# The data's name among the settings a cluster's workers compare before
# step 1: each reads its own --data_dir, and all must hold the same files.
SETTING = "data_dir"

# The files the suite writes in a train_dir, the traces of the retired
# --trace_step (of older releases) among them, and what an interrupted write
# leaves of each.
_CHECKPOINT_FILE = r"model\.ckpt-[0-9]+(\.index|\.meta|\.data-[0-9]+-of-[0-9]+)"
_INTERRUPTED = r"(\.tmp[0-9a-f]{32}|\.tempstate[0-9]+)?"
_SUITE_FILE = re.compile(
    r"^(checkpoint|graph\.pbtxt|events\.out\.tfevents\..+|%s|%s|%s|%s|%s|"
    r"trace_step_[0-9]+\.json)%s$"
    % (
        re.escape(LOCK_NAME),
        re.escape(MODEL_RECORD),
        re.escape(DATA_RECORD),
        re.escape(JOB_RECORD),
        _CHECKPOINT_FILE,
        _INTERRUPTED,
    )
)
# What an interrupted write leaves: a whole file written, then renamed
# (NAME.tmpHEX), a checkpoint file being written (NAME.tempstateDIGITS), a
# failed save's folder (model.ckpt-STEP_temp).
_INTERRUPTED_WRITE = re.compile(r"(\.tmp[0-9a-f]{32}|\.tempstate[0-9]+|_temp)$")
_SUITE_FOLDER = re.compile(r"^model\.ckpt-[0-9]+_temp$")
_TEMP_PART = re.compile(
    r"^part-[0-9]+-of-[0-9]+(\.index|\.data-[0-9]+-of-[0-9]+)"
    r"(\.tempstate[0-9]+)?$"
)
# The eval's default folder in the train_dir it scores, for TensorBoard.
EVAL_FOLDER = "eval"
# --profile_steps' folder: plugins/profile/RUN/HOST.xplane.pb and
# op_profile.txt.
PROFILES_FOLDER = "plugins"
_PROFILE_FILE = re.compile(
    r"^profile/[^/]+/([^/]+\.xplane\.pb|op_profile\.txt)$"
)
_CHECKPOINT_STEP = re.compile(r"^model\.ckpt-([0-9]+)\.(index|meta|data-)")
_EVENT_FILE = "events.out.tfevents."


def clear(train_dir, data_dirs=()):
    """Deletes the files the suite wrote in train_dir, and nothing else.

    A link, another folder or any other file is the user's and refuses the
    clearing (ValueError naming them, nothing deleted), as does a train_dir
    that is or contains one of data_dirs.
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
    others = [
        name + "/" if os.path.isdir(os.path.join(train_dir, name)) else name
        for name in names
        if not _written_by_suite(os.path.join(train_dir, name))
    ]
    if others:
        raise ValueError(
            "--clear_train_dir refused: %s holds %d file(s) or folder(s) the "
            "trainers do not write (%s); move them away or choose another "
            "--train_dir; nothing was deleted"
            % (train_dir, len(others), folders.listing(others))
        )
    removed = _removed(train_dir, names)
    for name in names:
        if name != LOCK_NAME:  # Held by this run.
            _delete(os.path.join(train_dir, name))
    print(removed, flush=True)


def interrupted_writes(train_dir):
    """The names of what the suite's interrupted writes left in train_dir,
    sorted, a folder's ending in '/'."""
    return sorted(
        name + ("/" if os.path.isdir(os.path.join(train_dir, name)) else "")
        for name in os.listdir(train_dir)
        if _INTERRUPTED_WRITE.search(name)
        and _written_by_suite(os.path.join(train_dir, name))
    )


def remove_interrupted_writes(train_dir):
    """Deletes what the suite's interrupted writes left in train_dir: they
    take the space a retry needs."""
    for name in interrupted_writes(train_dir):
        _delete(os.path.join(train_dir, name))


def _delete(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def recorded_model(train_dir):
    """The model train_dir's record names (e.g. 'resnet20'), or None."""
    text = _record(train_dir, MODEL_RECORD, "model")
    return None if text is None else text.strip() or None


def _record(train_dir, name, of):
    """The text of train_dir's record name (of what: 'model'), None where
    there is none; ValueError where it cannot be read."""
    path = os.path.join(train_dir, name)
    try:
        with open(path) as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    except IsADirectoryError:
        raise ValueError(
            "%s is a folder, where the trainers keep their record of the %s "
            "of %s; move it away" % (path, of, train_dir)
        ) from None
    except OSError as e:
        raise ValueError("%s cannot be read: %s" % (path, e.strerror)) from None


def record_model(train_dir, model_name):
    """Writes train_dir's record of model_name, unless it says so already."""
    if recorded_model(train_dir) == model_name:
        return
    path = os.path.join(train_dir, MODEL_RECORD)
    with folders.written_aside(path) as part, open(part, "w") as f:
        f.write(model_name + "\n")


def with_setting(settings, data):
    """settings (what the workers compare) with data's summary as SETTING;
    settings itself when either is None (outside a cluster, no data)."""
    if settings is None or data is None:
        return settings
    return dict(settings, **{SETTING: data.summary()})


def recorded_data(train_dir):
    text = _record(train_dir, DATA_RECORD, "data")
    lines = [] if text is None else text.splitlines()
    return (lines[0], tuple(lines[1:])) if lines else None


def record_data(train_dir, data):
    """Writes data as train_dir's record, unless it says so already."""
    if recorded_data(train_dir) == data:
        return
    path = os.path.join(train_dir, DATA_RECORD)
    with folders.written_aside(path) as part, open(part, "w") as f:
        f.write(data.text())


def refuse_other_data(train_dir, data, data_dir):
    """ValueError when train_dir was trained on other data than data.

    A train_dir with checkpoints but no record (written before the suite
    kept one) takes data as its own, with a line saying so.
    """
    held = recorded_data(train_dir)
    data_flag = "--data_dir=%s" % data_dir
    record = os.path.join(train_dir, DATA_RECORD)
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
    """The eval's check: ValueError when train_dir was trained on another
    data set than description (e.g. 'CIFAR-10'; the eval reads no training
    file to compare)."""
    held = recorded_data(train_dir)
    if held is None or held[0] == description:
        return
    record = os.path.join(train_dir, DATA_RECORD)
    raise ValueError(
        "--checkpoint_dir=%s was trained on %s, not on %s in --data_dir=%s "
        "(%s names its files): its scores there would say nothing of it; "
        "pass the --data_dir it was trained on"
        % (train_dir, held[0], description, data_dir, record)
    )


def contents(train_dir):
    """dict name -> (size, mtime in ns) in train_dir, for `put_back`."""
    if not os.path.isdir(train_dir):
        return None
    return {name: _state(train_dir, name) for name in os.listdir(train_dir)}


def _state(train_dir, name):
    status = os.lstat(os.path.join(train_dir, name))
    return status.st_size, status.st_mtime_ns


def put_back(train_dir, before):
    """Removes what the suite wrote in train_dir since `contents` was taken,
    for a run that fails before its first step.

    Where the run rewrote a file that was there (a resumed run saves its
    starting checkpoint again, in new shards), nothing goes: the new files
    are what it now names.
    """
    if not os.path.isdir(train_dir):
        return
    names = os.listdir(train_dir)
    found = before or {}
    if any(
        _state(train_dir, name) != found[name]
        for name in names
        if name in found and name != LOCK_NAME
    ):
        return
    for name in sorted(set(names) - set(found)):
        path = os.path.join(train_dir, name)
        if _written_by_suite(path):
            _delete(path)
    if before is None and not os.listdir(train_dir):
        os.rmdir(train_dir)


def _written_by_suite(path):
    name = os.path.basename(path)
    if os.path.islink(path):
        return False
    if os.path.isdir(path) and name == PROFILES_FOLDER:
        return _holds_only_profiles(path)
    if os.path.isdir(path):
        # The eval's event files, or a failed save's parts.
        if name == EVAL_FOLDER:
            belongs = re.compile(re.escape(_EVENT_FILE)).match
        elif _SUITE_FOLDER.match(name):
            belongs = _TEMP_PART.match
        else:
            return False
        return all(
            belongs(each)
            and os.path.isfile(os.path.join(path, each))
            and not os.path.islink(os.path.join(path, each))
            for each in os.listdir(path)
        )
    return os.path.isfile(path) and bool(_SUITE_FILE.match(name))


def _holds_only_profiles(folder):
    for parent, subfolders, files in os.walk(folder):
        for name in subfolders + files:
            path = os.path.join(parent, name)
            relative = os.path.relpath(path, folder)
            if os.path.islink(path):
                return False
            if name in files and not _PROFILE_FILE.match(relative):
                return False
            if name in subfolders and relative.count(os.sep) > 1:
                return False
    return True


def _removed(train_dir, names):
    names = [name for name in names if name != LOCK_NAME]
    if not names:
        return "--clear_train_dir: %s held nothing to remove" % train_dir
    checkpoint_files = [_CHECKPOINT_STEP.match(name) for name in names]
    steps = {found.group(1) for found in checkpoint_files if found}
    events = [name for name in names if name.startswith(_EVENT_FILE)]
    # Of the suite's names, only the eval's folder is named 'eval'.
    evals = [name for name in names if name == EVAL_FOLDER]
    profiles = [name for name in names if name == PROFILES_FOLDER]
    others = len(names) - len(events + evals + profiles)
    removed = [
        "%d checkpoint(s)" % len(steps),
        "%d event file(s)" % len(events),
        "%d other file(s)" % (others - sum(map(bool, checkpoint_files))),
    ]
    for name in evals:
        removed.append(
            "the eval's folder %s/ (%d event file(s))"
            % (name, len(os.listdir(os.path.join(train_dir, name))))
        )
    for name in profiles:
        runs = os.path.join(train_dir, name, "profile")
        removed.append(
            "the profiles' folder %s/ (%d profile(s))"
            % (name, len(os.listdir(runs)) if os.path.isdir(runs) else 0)
        )
    return "--clear_train_dir: removed %s and %s from %s" % (
        ", ".join(removed[:-1]),
        removed[-1],
        train_dir,
    )
