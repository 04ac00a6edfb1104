"""Cluster tasks as processes on 127.0.0.1: starting, waiting, ending."""

import re
import time

import numpy as np

from helpers.scripts import run_snippets
from verification.processes import free_ports, start_script

SCRIPT = "cifar10_multi_gpu_train.py"
# Seconds a test waits for a task to end before it fails.
TASK_DEADLINE_SECS = 180
# The operation timeout of the fault tests: a dead peer must end a run
# within it (plus start-up and the probe of the peers).
FAULT_TIMEOUT_SECS = 15


class Cluster:
    """Starts the tasks of one cluster and ends them all at the end."""

    def __init__(self, tmp_path, script, num_workers, *flags, num_ps=1):
        ps_ports = free_ports(num_ps + num_workers)
        ps_ports, worker_ports = ps_ports[:num_ps], ps_ports[num_ps:]
        self.script = script
        self.ps_address = ",".join("127.0.0.1:%d" % p for p in ps_ports)
        self.worker_addresses = ["127.0.0.1:%d" % p for p in worker_ports]
        self.tmp_path = tmp_path
        self.flags = [
            "--ps_hosts=%s" % self.ps_address,
            "--worker_hosts=%s" % ",".join(self.worker_addresses),
            "--cpu_towers",
            "--fake_data",
            *flags,
        ]
        self.processes = {}

    def train_dir(self, index):
        return self.tmp_path / ("train%d" % index)

    def start(self, job_name, index, *flags, env=None):
        """Starts a task; env: environment variables beside the scripts'."""
        name = "%s%d" % (job_name, index)
        self.processes[name] = start_script(
            self.script,
            *self.flags,
            "--job_name=%s" % job_name,
            "--task_index=%d" % index,
            "--train_dir=%s" % self.train_dir(index),
            *flags,
            log_path=self.log_path(name),
            env=env,
        )
        return self.processes[name]

    def log_path(self, name):
        return self.tmp_path / ("%s.log" % name)

    def log(self, name):
        return self.log_path(name).read_text()

    def wait(self, name):
        """Waits for a task to end; returns (exit code, seconds waited)."""
        start = time.time()
        code = self.processes[name].wait(timeout=TASK_DEADLINE_SECS)
        return code, time.time() - start

    def stop_all(self):
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def _local_steps(log):
    """(local steps, global step) from 'Worker task N ran R local steps...'."""
    found = re.search(r"ran (\d+) local steps; global step (\d+)\.", log)
    assert found, log[-3000:]
    return int(found[1]), int(found[2])


def run_to_the_end(cluster, num_workers):
    cluster.start("ps", 0)
    for index in range(num_workers):
        cluster.start("worker", index)
    for index in range(num_workers):
        code, _ = cluster.wait("worker%d" % index)
        assert code == 0, cluster.log("worker%d" % index)[-3000:]
    code, _ = cluster.wait("ps0")
    assert code == 0, cluster.log("ps0")[-3000:]
    return [
        _local_steps(cluster.log("worker%d" % i)) for i in range(num_workers)
    ]


def with_tracebacks(cluster, names):
    """The tasks of names whose log holds a traceback or a thread's
    uncaught exception ('Exception in thread ...'), none of them ours."""
    return [
        name
        for name in names
        if re.search(r"Traceback|Exception in thread", cluster.log(name))
    ]


# A lost peer ends the run after --operation_timeout_secs, not never; the
# bound leaves room for a machine loaded by other tests (37.7 s seen once).
FAULT_EXIT_BOUND_SECS = 4 * FAULT_TIMEOUT_SECS


def wait_for_step(cluster, name, step):
    """Waits until the task has logged a global step of at least step."""
    _wait_until(
        cluster,
        name,
        lambda log: (
            max(map(int, re.findall(r"step (\d+),", log)), default=0) >= step
        ),
    )


def wait_for_line(cluster, name, pattern):
    """Waits until a line of the task's log matches pattern."""
    _wait_until(
        cluster, name, lambda log: re.search(pattern, log, re.MULTILINE)
    )


def _wait_until(cluster, name, seen):
    deadline = time.time() + TASK_DEADLINE_SECS
    while not seen(cluster.log(name)):
        assert time.time() < deadline, cluster.log(name)[-3000:]
        assert cluster.processes[name].poll() is None, cluster.log(name)
        time.sleep(0.5)


def run_workers(snippet, num_workers, tmp_path, *args):
    """Runs `python -c snippet HOSTS INDEX OUTPUT *args` per worker at once.

    HOSTS lists the workers' addresses on 127.0.0.1 (comma-separated),
    INDEX is the worker's task index and OUTPUT the .npz file
    tmp_path/workerINDEX.npz that the snippet writes.

    Returns:
      A list (one per worker) of dicts name -> array, the OUTPUT files.
    """
    hosts = ",".join("127.0.0.1:%d" % p for p in free_ports(num_workers))
    outputs = [tmp_path / ("worker%d.npz" % i) for i in range(num_workers)]
    codes = run_snippets(
        snippet,
        [(hosts, i, out, *args) for i, out in enumerate(outputs)],
        TASK_DEADLINE_SECS,
    )
    assert codes == [0] * num_workers
    return [dict(np.load(out)) for out in outputs]
