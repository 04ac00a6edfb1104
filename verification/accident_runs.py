"""The processes of one accident cell: a kind of run's tasks on 127.0.0.1,
or on two hosts (`linked_hosts`) where the accident needs them.

Every task runs cifar10_multi_gpu_train.py on one CPU tower, the sample
set and batches of 4, with its own log; `Tasks.end` kills (by pid) and
waits for every process it started, whatever happened.
"""

import contextlib
import os
import re
import signal
import time

from multigpu import cpp_log_filter
from multigpu.distributed import kinds
from verification.data_files import folder_contents
from verification.processes import free_ports, start_script

SCRIPT = "cifar10_multi_gpu_train.py"
# The workers' bound on a lost peer, and the ps's (which also waits for its
# workers to start, slow on a loaded machine).
WORKER_TIMEOUT_SECS = 30
PS_TIMEOUT_SECS = 60
# Seconds a cell waits for a line of a task, or for a task to end.
WAIT_SECS = 300
# The flags of every task of every kind.
COMMON_FLAGS = (
    "--cpu_towers",
    "--num_gpus=1",
    "--fake_data",
    "--batch_size=4",
    "--log_frequency=1",
    "--clip_gradients=5",
)
# The tasks of each kind: (name, job, index); the chief is the first worker.
TASKS = {
    kinds.LOCAL.name: (("local", "", 0),),
    kinds.PS.name: (
        ("ps0", "ps", 0),
        ("worker0", "worker", 0),
        ("worker1", "worker", 1),
    ),
    kinds.WORKERS_ONLY.name: (
        ("worker0", "worker", 0),
        ("worker1", "worker", 1),
    ),
}
TASKS[kinds.PS_SYNC.name] = TASKS[kinds.PS.name]
KIND_FLAGS = {
    kinds.LOCAL.name: (),
    kinds.PS.name: (),
    kinds.PS_SYNC.name: ("--sync_replicas",),
    kinds.WORKERS_ONLY.name: ("--variable_update=replicated",),
}


class Tasks:
    """The tasks of one kind of run, started alike in one folder.

    root: a pathlib.Path, empty; holds each task's train_dir (trainNAME),
    the data (data/) and the logs (NAME_RUN.log).
    """

    def __init__(self, kind, root, *flags):
        self.kind, self.root = kind, root
        self.names = [name for name, _, _ in TASKS[kind.name]]
        self.ports = dict(zip(self.names, free_ports(len(self.names))))
        # name -> the (namespace, link end, address) of its host
        # (`linked_hosts`), where not 127.0.0.1 of this machine's.
        self.hosts = {}
        self.flags = [*COMMON_FLAGS, *KIND_FLAGS[kind.name], *flags]
        # name -> its --data_dir, where not root/data; its --train_dir,
        # where not root/train_NAME.
        self.data_dirs, self.train_dirs = {}, {}
        # name -> its process, and the run (1, 2, ...) that started it.
        self.processes, self.runs, self.run = {}, {}, 0
        # What the cell set up outside the processes (a mount), undone at
        # the end.
        self.set_up = contextlib.ExitStack()

    @property
    def cluster_flags(self):
        """--ps_hosts and --worker_hosts, as far as the kind has them."""
        hosts = {
            job: ",".join(
                "%s:%d" % (self.address(n), self.ports[n])
                for n, j, _ in TASKS[self.kind.name]
                if j == job
            )
            for job in ("ps", "worker")
        }
        return [
            "--%s_hosts=%s" % (job, hosts[job]) for job in hosts if hosts[job]
        ]

    def address(self, name):
        return self.hosts[name][2] if name in self.hosts else "127.0.0.1"

    @property
    def chief(self):
        return self.names[0] if self.names[0] != "ps0" else "worker0"

    def train_dir(self, name):
        return self.train_dirs.get(name, self.root / ("train_" + name))

    def data_dir(self, name):
        return self.data_dirs.get(name, self.root / "data")

    def task_flags(self, name):
        """The command line of the task name, as a user would give it."""
        [(job, index)] = [
            (j, i) for n, j, i in TASKS[self.kind.name] if n == name
        ]
        flags = list(self.flags)
        if job:
            timeout = PS_TIMEOUT_SECS if job == "ps" else WORKER_TIMEOUT_SECS
            flags += [
                *self.cluster_flags,
                "--job_name=%s" % job,
                "--task_index=%d" % index,
                "--operation_timeout_secs=%d" % timeout,
            ]
        return [
            *flags,
            "--data_dir=%s" % self.data_dir(name),
            "--train_dir=%s" % self.train_dir(name),
        ]

    def start(self, *extra, only=None, flags_of=None):
        """Starts every task (or those in only) once more, the chief last.

        flags_of: name -> flags added to that task's command only.
        """
        self.run += 1
        for name in reversed(self.names):
            if only is None or name in only:
                self.runs[name] = self.run
                self.processes[name] = start_script(
                    SCRIPT,
                    *self.task_flags(name),
                    *extra,
                    *(flags_of or {}).get(name, ()),
                    log_path=self.log_path(name),
                    prefix=(
                        ("ip", "netns", "exec", self.hosts[name][0])
                        if name in self.hosts
                        else ()
                    ),
                )

    def log_path(self, name, run=None):
        return self.root / ("%s_%d.log" % (name, run or self.runs[name]))

    def log(self, name, run=None):
        return self.log_path(name, run).read_text()

    def wait_for(self, name, pattern, *others):
        """Waits until the task's log (or one of the others') matches
        pattern; returns the match."""
        deadline = time.monotonic() + WAIT_SECS
        while True:
            names = (name, *others)
            for each in names:
                found = re.search(pattern, self.log(each), re.MULTILINE)
                if found:
                    return found
            if all(self.processes[n].poll() is not None for n in names):
                raise RuntimeError(
                    "%s ended first:\n%s" % (name, self.log(name)[-2000:])
                )
            if time.monotonic() > deadline:
                raise RuntimeError("%s: no %r" % (name, pattern))
            time.sleep(0.05)

    def wait_for_step(self, name, step, *others):
        """Waits for the log line of step (or a later one) on the task, or
        on one of the others."""
        digits = len(str(step))
        later = [str(n) for n in range(step, 10**digits)]
        return self.wait_for(
            name,
            r": step (%s|[1-9]\d{%d,}), loss" % ("|".join(later), digits),
            *others,
        )

    def signal(self, name, signum=signal.SIGTERM):
        os.kill(self.processes[name].pid, signum)

    def codes(self):
        """Waits for every task of the last start; name -> exit code."""
        return {
            name: process.wait(timeout=WAIT_SECS)
            for name, process in self.processes.items()
        }

    def last_line(self, name):
        """The task's last line that a user sees: TensorFlow's C++ lines
        that the scripts' filter drops for them (`cpp_log_filter`) are
        left out (the tasks run with TF_CPP_MIN_LOG_LEVEL set, unfiltered)."""
        seen = [
            line
            for line in self.log(name).strip().split("\n")
            if not cpp_log_filter.is_dropped(line.encode(), gpu_driver=False)
        ]
        return (seen or [""])[-1]

    def last_lines(self):
        return {name: self.last_line(name) for name in self.processes}

    def folder(self):
        """The chief's train_dir: relative path -> bytes; None if absent."""
        path = self.train_dir(self.chief)
        return folder_contents(path) if path.exists() else None

    def end(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=60)
        self.set_up.close()
