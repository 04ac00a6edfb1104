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
import sys
import time

from data_sets import cifar10_data
from multigpu.distributed import ps
from verification.accident_runs import WAIT_SECS, Tasks
from verification.data_files import fill_disk, write_cifar10_files

# The line every trainer prints early, before its graph, on the sample set.
START_UP_LINE = r"^NOTE: \S+ holds the built-in sample set"
SERVER_LINE = r"^worker task 1: gRPC server listening"
# The step whose log line an accident follows.
ACCIDENT_STEP = 3
# A tmpfs this small, filled in blocks of 64 KiB, keeps no byte free.
FULL_DISK_SIZE = "256k"
# The flag a chief is started again with, or an earlier job ran at.
OTHER_RATE = "--learning_rate=0.05"
# A ps that waits for its chief as long as a cell waits for anything: the
# one a chief restarts on, or a new job's chief starts on, while a loaded
# machine takes tens of seconds to start it.
PATIENT_PS = {"ps0": ("--operation_timeout_secs=%d" % WAIT_SECS,)}
# No bound on a task's waits (--operation_timeout_secs=0).
UNBOUNDED = ("--operation_timeout_secs=0",)
# The folder of a second job's chief (`second_job`), and its name in a
# cell's outcome.
SECOND_JOB = "second_job"
SECOND_CHIEF = "worker0 (a second job)"
# What a chief restarted with its job's flags says, then its first step.
TRAINS_ON = r"the ps tasks hold this job already: training on from[\s\S]*: step"


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


def mid_run(tasks, signum=signal.SIGTERM):
    """signum once the signalled task logged ACCIDENT_STEP."""
    _sample_set(tasks)
    tasks.start()
    step = int(tasks.wait_for_step(signalled(tasks), ACCIDENT_STEP)[1])
    tasks.signal(signalled(tasks), signum)
    return {"logged": step, "signum": signum}


def last_step(tasks):
    """SIGTERM once the signalled task logged the step before the last."""
    _sample_set(tasks)
    tasks.start()
    max_steps = int(re.search(r"--max_steps=(\d+)", " ".join(tasks.flags))[1])
    tasks.wait_for_step(signalled(tasks), max_steps - 1)
    tasks.signal(signalled(tasks))
    return {}


def _saving(tasks):
    """Whether a save's temporary folder shows in the chief's train_dir."""
    folder = tasks.train_dir(tasks.chief)
    return any(
        re.fullmatch(r"model\.ckpt-[1-9]\d*_temp", name)
        for name in (os.listdir(str(folder)) if folder.exists() else ())
    )


def _wait_for_a_save(tasks):
    deadline = time.monotonic() + WAIT_SECS
    while not _saving(tasks):
        assert time.monotonic() < deadline, "no save"
        assert tasks.processes[tasks.chief].poll() is None
        time.sleep(0.005)


def during_save(tasks):
    """SIGTERM to the chief once a save's temporary folder shows."""
    _sample_set(tasks)
    tasks.start()
    _wait_for_a_save(tasks)
    tasks.signal(tasks.chief)
    return {}


def killed_in_a_save(tasks):
    """kill -9 of every task while the chief's save is half written (the
    chief frozen with its temporary folder there), then the same commands."""
    _sample_set(tasks)
    tasks.start()
    while True:
        _wait_for_a_save(tasks)
        tasks.signal(tasks.chief, signal.SIGSTOP)
        if _saving(tasks):
            break
        tasks.signal(tasks.chief, signal.SIGCONT)
    _kill(tasks, tasks.names)
    tasks.start()
    return {}


def _kill(tasks, names):
    """kill -9 of the tasks names; waits for their end."""
    for name in names:
        tasks.signal(name, signal.SIGKILL)
    for name in names:
        tasks.processes[name].wait(timeout=WAIT_SECS)


def killed_then_again(tasks):
    """kill -9 of every task once a worker logged ACCIDENT_STEP (a ps
    cluster's chief may log none of the job's steps: worker 1 may run them
    all while the chief makes its first), then the same commands."""
    _sample_set(tasks)
    tasks.start()
    workers = [name for name in tasks.names if name != "ps0"]
    tasks.wait_for_step(workers[0], ACCIDENT_STEP, *workers[1:])
    _kill(tasks, tasks.names)
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
def tmpfs_folder(path, options):
    """path, an empty tmpfs mounted with options (needs root) for the
    block."""
    path.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
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
    folder = tasks.train_dir(tasks.chief)
    tasks.set_up.enter_context(tmpfs_folder(folder, "ro,size=1M"))
    tasks.start()
    return {"before": tasks.folder()}


def full_disk(tasks):
    """The chief's --train_dir is a disk filled to its last byte."""
    _sample_set(tasks)
    folder = tasks.train_dir(tasks.chief)
    tasks.set_up.enter_context(tmpfs_folder(folder, "size=" + FULL_DISK_SIZE))
    fill_disk(folder)
    before = tasks.folder()
    tasks.start()
    return {"before": before}


def lost_peer(tasks, name):
    """kill -9 of the task name once the chief logged ACCIDENT_STEP."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    tasks.signal(name, signal.SIGKILL)
    return {}


def frozen(tasks):
    """The task a frozen peer or another program is: the ps, or worker 1
    in a cluster of workers only."""
    return "ps0" if "ps0" in tasks.names else "worker1"


def frozen_peer(tasks):
    """SIGSTOP of the ps (or worker 1: `frozen`) once the chief logged
    ACCIDENT_STEP; kill -9 of it once every other task ended."""
    _sample_set(tasks)
    tasks.start()
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    tasks.signal(frozen(tasks), signal.SIGSTOP)
    for name in tasks.names:
        if name != frozen(tasks):
            tasks.processes[name].wait(timeout=WAIT_SECS)
    _kill(tasks, [frozen(tasks)])
    return {}


def program_on_port(tasks):
    """Another program (python -m http.server) holds the port of the ps
    (or of worker 1: `frozen`) as the other tasks start."""
    _sample_set(tasks)
    name = frozen(tasks)
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1"]
        + [str(tasks.ports[name])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tasks.set_up.callback(server.wait, timeout=60)
    tasks.set_up.callback(server.kill)
    address = "127.0.0.1:%d" % tasks.ports[name]
    deadline = time.monotonic() + WAIT_SECS
    while not ps.answers(address):
        assert time.monotonic() < deadline, "http.server did not listen"
        time.sleep(0.05)
    tasks.start(only=[n for n in tasks.names if n != name])
    return {}


def second_job(tasks):
    """A second job's chief (the same flags, its own worker ports and
    --train_dir SECOND_JOB/train_worker0) against the ps of the running
    job, whose chief is frozen from its ACCIDENT_STEP (else the job may
    end first) until the second chief ended; every task of the job waits
    without bound (UNBOUNDED), so that the freeze alone ends nothing.

    Returns:
      {"ended": {SECOND_CHIEF: (exit code, last line)}}.
    """
    _sample_set(tasks)
    tasks.start(flags_of=dict.fromkeys(tasks.names, UNBOUNDED))
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    tasks.signal(tasks.chief, signal.SIGSTOP)
    other = Tasks(tasks.kind, tasks.root / SECOND_JOB)
    other.root.mkdir()
    other.flags = list(tasks.flags)
    other.ports["ps0"] = tasks.ports["ps0"]
    other.data_dirs = {tasks.chief: tasks.data_dir(tasks.chief)}
    try:
        other.start(only=(tasks.chief,))
        code = other.processes[tasks.chief].wait(timeout=WAIT_SECS)
        ended = {SECOND_CHIEF: (code, other.last_line(tasks.chief))}
    finally:
        other.end()
        tasks.signal(tasks.chief, signal.SIGCONT)
    return {"ended": ended}


def other_data(tasks):
    """Worker 1's --data_dir holds other CIFAR-10 files than the chief's."""
    tasks.flags.remove("--fake_data")
    tasks.data_dirs = {"worker1": tasks.root / "other_data"}
    write_cifar10_files(tasks.data_dir(tasks.chief), 40, seed=0)
    write_cifar10_files(tasks.data_dir("worker1"), 40, seed=1)
    tasks.start()
    return {}


def stale_ps(tasks):
    """kill -9 of both workers of an earlier job at OTHER_RATE once its
    chief logged ACCIDENT_STEP, its ps left running (PATIENT_PS); then a
    new job's chief and worker (the default rate, a new --train_dir)
    against that ps; once they ended, kill -9 of the ps."""
    _sample_set(tasks)
    tasks.train_dirs = {tasks.chief: tasks.root / "train_earlier_job"}
    tasks.start(OTHER_RATE, flags_of=PATIENT_PS)
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    _kill(tasks, ["worker0", "worker1"])
    tasks.train_dirs = {}
    tasks.start(only=("worker0", "worker1"))
    for name in ("worker0", "worker1"):
        tasks.processes[name].wait(timeout=WAIT_SECS)
    _kill(tasks, ["ps0"])
    return {}


def restarted_chief(tasks):
    """kill -9 of the chief once it logged ACCIDENT_STEP, worker 1 frozen
    meanwhile (so that the job waits for its chief); worker 1 and the ps
    wait without bound (UNBOUNDED: the frozen worker's step would else
    time out, as it did after minutes frozen); the chief started again at
    OTHER_RATE, then with the job's flags; worker 1 goes on once the
    chief trained on a step (else worker 1 may end the job before it, and
    the chief's line differs).

    Returns:
      {"ended": {"worker0 (OTHER_RATE)": (exit code, last line)}}.
    """
    _sample_set(tasks)
    tasks.start(flags_of=dict.fromkeys(("ps0", "worker1"), UNBOUNDED))
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    tasks.signal("worker1", signal.SIGSTOP)
    _kill(tasks, [tasks.chief])
    tasks.start(OTHER_RATE, only=(tasks.chief,))
    code = tasks.processes[tasks.chief].wait(timeout=WAIT_SECS)
    other = "%s (%s)" % (tasks.chief, OTHER_RATE)
    ended = {other: (code, tasks.last_line(tasks.chief))}
    assert tasks.processes["worker1"].poll() is None
    tasks.start(only=(tasks.chief,))
    try:
        tasks.wait_for(tasks.chief, TRAINS_ON)
    finally:
        tasks.signal("worker1", signal.SIGCONT)
    return {"ended": ended}
