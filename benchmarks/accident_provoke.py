"""How each accident is provoked on a kind's tasks (`accident_runs.Tasks`).

Each function starts the tasks, provokes its accident and returns a dict
of what the expectation needs (the step of a signal, the folder before);
the caller waits for every task and reads what is left.
"""

import contextlib
import os
import re
import signal
import subprocess
import time

from benchmarks.accident_runs import WAIT_SECS
from data_sets import cifar10_data
from tests.helpers.data_files import write_cifar10_files

# The line every trainer prints early, before its graph, on the sample set.
START_UP_LINE = r"^NOTE: \S+ holds the built-in sample set"
SERVER_LINE = r"^worker task 1: gRPC server listening"
# The step whose log line an accident follows.
ACCIDENT_STEP = 3


def _sample_set(tasks):
    cifar10_data.write_fake_data(str(tasks.data_dir(tasks.chief)))


def start_up(tasks):
    """SIGTERM to the process, or worker 1, once it printed its first line."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for(signalled(tasks), START_UP_LINE)
    tasks.signal(signalled(tasks))
    return {}


def agreement(tasks):
    """SIGTERM to worker 1 once its server listens (before step 1)."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for("worker1", SERVER_LINE)
    tasks.signal("worker1")
    return {}


def signalled(tasks):
    """The task a signal mid-run goes to: the process, or worker 1."""
    return "local" if tasks.chief == "local" else "worker1"


def mid_run(tasks):
    """SIGTERM once the signalled task logged ACCIDENT_STEP."""
    _sample_set(tasks)
    tasks.start()
    step = int(tasks.wait_for_step(signalled(tasks), ACCIDENT_STEP)[1])
    tasks.signal(signalled(tasks))
    return {"logged": step}


def last_step(tasks):
    """SIGTERM once the signalled task logged the step before the last."""
    _sample_set(tasks)
    tasks.start()
    max_steps = int(re.search(r"--max_steps=(\d+)", " ".join(tasks.flags))[1])
    tasks.wait_for_step(signalled(tasks), max_steps - 1)
    tasks.signal(signalled(tasks))
    return {}


def during_save(tasks):
    """SIGTERM to the chief once a save's temporary folder shows."""
    _sample_set(tasks)
    tasks.start()
    folder = tasks.train_dir(tasks.chief)
    deadline = time.monotonic() + WAIT_SECS
    while not any(
        re.fullmatch(r"model\.ckpt-[1-9]\d*_temp", name)
        for name in (os.listdir(str(folder)) if folder.exists() else ())
    ):
        assert time.monotonic() < deadline, "no save"
        assert tasks.processes[tasks.chief].poll() is None
        time.sleep(0.005)
    tasks.signal(tasks.chief)
    return {}


def killed_then_again(tasks):
    """kill -9 of every task at ACCIDENT_STEP, then the same commands."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    for name in tasks.names:
        tasks.signal(name, signal.SIGKILL)
    tasks.codes()
    tasks.start()
    return {}


def finished_again(tasks):
    """The same commands again once every task of the job exited 0."""
    _sample_set(tasks)
    tasks.start()
    codes = tasks.codes()
    assert set(codes.values()) == {0}, tasks.last_lines()
    before = tasks.folder()
    tasks.start()
    return {"before": before}


@contextlib.contextmanager
def read_only_folder(path):
    """path, an empty read-only tmpfs (needs root) for the block."""
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def read_only(tasks):
    """The chief's --train_dir is an empty read-only disk."""
    _sample_set(tasks)
    tasks.set_up.enter_context(read_only_folder(tasks.train_dir(tasks.chief)))
    tasks.start()
    return {"before": tasks.folder()}


def lost_peer(tasks, name):
    """kill -9 of the task name once the chief logged ACCIDENT_STEP."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    tasks.signal(name, signal.SIGKILL)
    return {}


def other_data(tasks):
    """Worker 1's --data_dir holds other CIFAR-10 files than the chief's."""
    tasks.flags.remove("--fake_data")
    tasks.data_dirs = {"worker1": tasks.root / "other_data"}
    write_cifar10_files(tasks.data_dir(tasks.chief), 40, seed=0)
    write_cifar10_files(tasks.data_dir("worker1"), 40, seed=1)
    tasks.start()
    return {}
