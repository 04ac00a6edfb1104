"""Two hosts for real: a cluster of workers in two network namespaces.

Each worker runs in a network namespace of its own, joined by a veth pair,
with an address from 198.18.0.0/15 (RFC 2544's range for network tests),
so that the workers reach each other over a link the test can set down.
Making namespaces needs root (as in CI) and `ip`; elsewhere the tests
skip, saying so. Every namespace a test makes is deleted at its end, which
deletes its end of the link too.
"""

import re
import time

import pytest
import tensorflow as tf
from conftest import checkpoint_steps, start_script
from helpers.cluster import (
    FAULT_EXIT_BOUND_SECS,
    FAULT_TIMEOUT_SECS,
    TASK_DEADLINE_SECS,
    Cluster,
    free_ports,
    wait_for_step,
)

from verification import linked_hosts

SCRIPT = "cifar10_multi_gpu_train.py"
NAMES = ("worker0", "worker1")
# The step the resume test's commands train to: its link goes down at
# about step 5 (a step takes about 0.1 s on 2 loaded cores).
MAX_STEPS = 150


@pytest.fixture
def two_hosts():
    """Yields (namespace, link end, address) of each host; cleans up."""
    if linked_hosts.missing():
        pytest.skip(linked_hosts.missing())
    try:
        hosts = linked_hosts.make()
    except linked_hosts.Unavailable as e:
        pytest.skip(str(e))
    yield hosts
    linked_hosts.delete(hosts)


class _Workers(Cluster):
    """Worker i of a cluster of workers only in host i's namespace."""

    def __init__(self, hosts, tmp_path, data_dir):
        ports = free_ports(len(hosts))
        self.worker_addresses = [
            "%s:%d" % (address, port)
            for (_, _, address), port in zip(hosts, ports)
        ]
        self.hosts, self.tmp_path = hosts, tmp_path
        self.flags = [
            "--worker_hosts=%s" % ",".join(self.worker_addresses),
            "--job_name=worker",
            "--variable_update=replicated",
            "--num_gpus=2",
            "--cpu_towers",
            "--fake_data",
            "--data_dir=%s" % data_dir,
            "--batch_size=4",
            "--log_frequency=1",
            "--operation_timeout_secs=%d" % FAULT_TIMEOUT_SECS,
        ]
        self.processes = {}

    def start_all(self, *flags_of_each):
        """Starts worker i with flags_of_each[i] in host i's namespace."""
        for index, flags in enumerate(flags_of_each):
            name = "worker%d" % index
            self.processes[name] = start_script(
                SCRIPT,
                *self.flags,
                "--task_index=%d" % index,
                "--train_dir=%s" % self.train_dir(index),
                *flags,
                log_path=self.log_path(name),
                prefix=("ip", "netns", "exec", self.hosts[index][0]),
            )


@pytest.fixture
def workers(two_hosts, tmp_path, cifar10_data_dir):
    made = _Workers(two_hosts, tmp_path, cifar10_data_dir)
    yield made
    made.stop_all()


@pytest.mark.slow
def test_workers_on_two_hosts_that_differ_end_both_naming_the_flag(workers):
    workers.start_all(["--learning_rate=0.1"], ["--learning_rate=0.01"])
    for name, process in workers.processes.items():
        assert process.wait(timeout=TASK_DEADLINE_SECS) == 1
        assert workers.log(name).strip().split("\n")[-1] == (
            SCRIPT + ": error: --learning_rate differs between the workers: "
            "worker task 0 has 0.1, worker task 1 has 0.01; start every "
            "worker with the same --learning_rate (docs/cluster.md)"
        )


@pytest.mark.slow
def test_a_link_set_down_ends_both_workers_the_chief_saves_and_they_resume(
    workers, two_hosts
):
    commands = (["--max_steps=%d" % MAX_STEPS],) * 2
    workers.start_all(*commands)
    wait_for_step(workers, "worker0", 5)
    linked_hosts.set_link(two_hosts[0], "down")
    start = time.time()

    for process in workers.processes.values():
        assert process.wait(timeout=TASK_DEADLINE_SECS) == 1
    assert time.time() - start < FAULT_EXIT_BOUND_SECS
    last = {name: workers.log(name).strip().split("\n")[-1] for name in NAMES}
    saved = re.fullmatch(
        _lost(workers, 1)
        + r"; saved (\S+); run the same commands on every worker to resume "
        "from it",
        last["worker0"],
    )
    assert saved, last["worker0"]
    assert re.fullmatch(
        _lost(workers, 0)
        + re.escape(
            "; run the same commands on every worker to resume from the "
            "chief's newest checkpoint"
        ),
        last["worker1"],
    ), last["worker1"]
    # The chief saved the last step it completed: the last it logged or
    # the one in flight, whose all-reduce finished before the link went.
    step = int(tf.train.load_checkpoint(saved[1]).get_tensor("global_step"))
    logged = max(map(int, re.findall(r"step (\d+),", workers.log("worker0"))))
    assert saved[1] == str(workers.train_dir(0) / ("model.ckpt-%d" % step))
    assert logged <= step <= logged + 1 < MAX_STEPS

    linked_hosts.set_link(two_hosts[0], "up")
    workers.start_all(*commands)
    for name, process in workers.processes.items():
        assert process.wait(timeout=TASK_DEADLINE_SECS) == 0, workers.log(name)
    resumed = workers.log("worker0")
    assert ": training from step %d\n" % step in resumed
    assert (
        "ran %d local steps; global step %d."
        % (
            MAX_STEPS - step,
            MAX_STEPS,
        )
        in resumed
    )
    assert checkpoint_steps(workers.train_dir(0))[-1] == MAX_STEPS


def _lost(workers, index):
    """The pattern of the line of a worker that lost worker task index."""
    return (
        re.escape(SCRIPT + ": error: lost the cluster after ")
        + r"\d+ local steps \(DeadlineExceededError\): "
        + re.escape(
            "unreachable: worker task %d (%s)"
            % (index, workers.worker_addresses[index])
        )
    )
