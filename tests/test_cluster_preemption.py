"""A signal to any worker of a cluster of workers only costs one step.

Two workers of one CPU tower each on 127.0.0.1; SIGTERM to one of them at
step k: every worker stops at one agreed step (>= k - 1), the chief saves
it, both exit 143 with the same line, and the same commands resume from it
to --max_steps. The quick test runs both workers' stop collectives in one
process, on two CPU devices.
"""

import os
import re
import signal
import time

import pytest
import tensorflow as tf
from conftest import checkpoint_steps, free_port, start_script

from multigpu.distributed import cluster
from multigpu.graph import collectives, placement
from multigpu.run import interrupts

SCRIPT = "cifar10_multi_gpu_train.py"
WORKERS = 2
# The steps of each run: far enough past the signal that the stop is the
# agreed one, not --max_steps.
MAX_STEPS = 20
# The step whose log line the signal follows.
SIGNAL_STEP = 5
# Generous bounds on a loaded machine (steps of 8 s were seen at a load of
# 21 on 2 cores): a worker's start-up and first steps; its end once every
# worker stopped (a save and the session's close); the resumed run.
START_BOUND_SECS = 240
EXIT_BOUND_SECS = 180
RESUME_BOUND_SECS = 600


class _Workers:
    """Two workers of the same command but --task_index, and their logs."""

    def __init__(self, tmp_path, data_dir):
        hosts = ",".join("127.0.0.1:%d" % free_port() for _ in range(WORKERS))
        self.tmp_path = tmp_path
        self.flags = [
            "--job_name=worker",
            "--worker_hosts=%s" % hosts,
            "--variable_update=replicated",
            # One tower each: the agreement is between workers.
            "--num_gpus=1",
            "--cpu_towers",
            "--fake_data",
            "--data_dir=%s" % data_dir,
            "--batch_size=8",
            "--log_frequency=1",
            "--max_steps=%d" % MAX_STEPS,
            # No periodic checkpoint: the one after step 0 is the signal's.
            "--save_checkpoint_steps=100000",
            "--operation_timeout_secs=60",
        ]
        self.processes = []

    def train_dir(self, index):
        return self.tmp_path / ("train%d" % index)

    def log_path(self, index, run):
        return self.tmp_path / ("worker%d_run%d.log" % (index, run))

    def start(self, run):
        """Starts every worker, the chief last, as docs/cluster.md does."""
        self.processes = [None] * WORKERS
        for index in reversed(range(WORKERS)):
            self.processes[index] = start_script(
                SCRIPT,
                *self.flags,
                "--task_index=%d" % index,
                "--train_dir=%s" % self.train_dir(index),
                log_path=self.log_path(index, run),
            )

    def wait_for_step(self, index, run, step):
        """Waits for the log line of step on a worker; returns the newest
        step its log shows."""
        deadline = time.monotonic() + START_BOUND_SECS
        while step not in self.steps(index, run):
            assert self.processes[index].poll() is None, self.log(index, run)
            assert time.monotonic() < deadline, self.log(index, run)
            time.sleep(0.05)
        return max(self.steps(index, run))

    def steps(self, index, run):
        return [
            int(s) for s in re.findall(r": step (\d+), ", self.log(index, run))
        ]

    def log(self, index, run):
        return self.log_path(index, run).read_text()

    def wait_all(self, bound_secs):
        """Every worker's exit code, each within bound_secs."""
        return [p.wait(timeout=bound_secs) for p in self.processes]

    def kill_all(self):
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.kill()
            if process is not None:
                process.wait(timeout=30)


@pytest.fixture
def workers(tmp_path, cifar10_data_dir):
    started = _Workers(tmp_path, cifar10_data_dir)
    yield started
    started.kill_all()


def _last_line(text):
    return text.strip().split("\n")[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "signalled, signum",
    # A closed terminal (SIGHUP) is taken as SIGTERM is.
    [(1, signal.SIGTERM), (0, signal.SIGHUP)],
    ids=["non-chief", "chief"],
)
def test_a_signal_to_one_worker_saves_one_agreed_step_and_resumes(
    workers, signalled, signum
):
    workers.start(run=0)
    workers.wait_for_step(signalled, 0, SIGNAL_STEP)
    os.kill(workers.processes[signalled].pid, signum)
    # The step in flight when the signal came, at the latest.
    signal_step = max(workers.steps(signalled, 0)) + 1

    assert workers.wait_all(EXIT_BOUND_SECS) == [128 + signum] * 2
    saved = checkpoint_steps(workers.train_dir(0))
    assert saved[-1] >= signal_step - 1
    assert saved[-1] < MAX_STEPS
    head = "%s: worker task %d got %s: every worker stopped at step %d; "
    head %= (SCRIPT, signalled, signal.Signals(signum).name, saved[-1])
    tail = "; run the same commands on every worker to resume"
    assert _last_line(workers.log(0, 0)) == head + "saved %s%s" % (
        workers.train_dir(0) / ("model.ckpt-%d" % saved[-1]),
        tail,
    )
    assert _last_line(workers.log(1, 0)) == head + (
        "the chief (worker task 0) saved the checkpoint of step %d%s"
        % (saved[-1], tail)
    )

    workers.start(run=1)
    assert workers.wait_all(RESUME_BOUND_SECS) == [0, 0], workers.log(0, 1)
    assert "training from step %d" % saved[-1] in workers.log(0, 1)
    assert checkpoint_steps(workers.train_dir(0))[-1] == MAX_STEPS


def _wait_for_line(path, text, process):
    """Waits until the log at path holds text, while process runs."""
    deadline = time.monotonic() + START_BOUND_SECS
    while not (path.exists() and text in path.read_text()):
        assert process.poll() is None, path.read_text()
        assert time.monotonic() < deadline, path.read_text()
        time.sleep(0.05)


@pytest.mark.slow
def test_a_sigterm_during_the_agreement_stops_every_worker_after_step_1(
    workers,
):
    # Worker 1 starts alone and waits in the agreement for the chief.
    workers.processes = [None, None]
    workers.processes[1] = start_script(
        SCRIPT,
        *workers.flags,
        "--task_index=1",
        "--train_dir=%s" % workers.train_dir(1),
        log_path=workers.log_path(1, 0),
    )
    _wait_for_line(
        workers.log_path(1, 0),
        "listening on all interfaces",
        workers.processes[1],
    )
    os.kill(workers.processes[1].pid, signal.SIGTERM)
    workers.processes[0] = start_script(
        SCRIPT,
        *workers.flags,
        "--task_index=0",
        "--train_dir=%s" % workers.train_dir(0),
        log_path=workers.log_path(0, 0),
    )

    assert workers.wait_all(EXIT_BOUND_SECS) == [143, 143]
    assert checkpoint_steps(workers.train_dir(0)) == [0, 1]
    head = "%s: worker task 1 got SIGTERM: every worker stopped at step 1; "
    tail = "; run the same commands on every worker to resume"
    assert _last_line(workers.log(0, 0)) == head % SCRIPT + "saved %s%s" % (
        workers.train_dir(0) / "model.ckpt-1",
        tail,
    )
    assert _last_line(workers.log(1, 0)) == head % SCRIPT + (
        "the chief (worker task 0) saved the checkpoint of step 1" + tail
    )


def test_a_ps_chiefs_signal_line_names_the_step_it_saved(three_checkpoints):
    # The other workers moved the global step from 29, as the hook read
    # it, to 30 before the chief's saver wrote it.
    task = cluster.cluster_task("h:1", "h:2,h:3", "worker", 0)
    hook = interrupts.InterruptHook()
    hook.signum, hook.step = signal.SIGTERM, 29

    interrupted = interrupts.interrupted(hook, str(three_checkpoints), task, 29)

    assert str(interrupted) == (
        "interrupted (SIGTERM) at step 30; saved %s; run the same command to "
        "resume" % (three_checkpoints / "model.ckpt-30")
    )


@pytest.mark.parametrize("kind", ["workers_only", "ps"])
def test_a_signal_no_step_carried_says_what_the_job_did_on_each_kind(kind):
    ps_hosts = "" if kind == "workers_only" else "h:1"
    task = cluster.cluster_task(ps_hosts, "h:2,h:3", "worker", 1)
    hook = interrupts.InterruptHook(stops_itself=not task.kind.agreed_stop)
    hook.signum, hook.step = signal.SIGTERM, MAX_STEPS

    interrupted = interrupts.interrupted(hook, "unused", task, MAX_STEPS)

    assert interrupted.exit_code == 143
    # In the last step, which ended the job before a next step could carry
    # the signal to the other workers; in the ps cluster, at any step.
    expected = {
        "workers_only": (
            "worker task 1 got SIGTERM in the job's last step: every worker "
            "finished at global step 20, whose checkpoint the chief (worker "
            "task 0) saved; nothing more to save"
        ),
        "ps": (
            "worker task 1 interrupted (SIGTERM) at global step 20 and left "
            "the cluster; the chief (worker task 0) and the other workers "
            "train on without it, and the chief saves the checkpoints; run "
            "the same command to rejoin"
        ),
    }
    assert str(interrupted) == expected[kind]


def _hook_graph(index, signum):
    """Worker index's PreemptionHook and its graph, devices cleared.

    Returns:
      (hook, its graph's GraphDef, the names of the tensors it feeds and
      fetches each step: [signal placeholder, signals]).
    """
    # No server is started: the graph is all the test takes of the task.
    task = cluster.cluster_task("", "127.0.0.1:1,127.0.0.1:2", "worker", index)
    interrupt = interrupts.InterruptHook(stops_itself=False)
    # As the handler records a signal, without installing one here.
    interrupt.signum = signum
    hook = interrupts.PreemptionHook(interrupt)
    with tf.Graph().as_default() as graph:
        # The stop collective alone, which a step of the cluster holds.
        collectives.stop_signals(task)
        hook.begin()
        args = hook.before_run(None)
    ((fed, value),) = args.feed_dict.items()
    assert value == float(signum or 0)
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.ClearField("device")
    return hook, graph_def, [fed.name, args.fetches.name]


def test_a_sigterm_to_one_worker_stops_every_workers_hook_after_one_step():
    # Both workers' graphs in one process, worker i on /cpu:i: their stop
    # collectives meet as across the cluster, by group and instance keys.
    signums = [None, signal.SIGTERM]
    hooks, feeds, fetches = [], {}, []
    with tf.Graph().as_default():
        for index, signum in enumerate(signums):
            hook, graph_def, names = _hook_graph(index, signum)
            with tf.device("/cpu:%d" % index):
                fed, fetched = tf.graph_util.import_graph_def(
                    graph_def, return_elements=names, name="worker%d" % index
                )
            hooks.append(hook)
            feeds[fed] = float(signum or 0)
            fetches.append(fetched)
        config = placement.session_config(
            ["/cpu:0", "/cpu:1"], operation_timeout_secs=60
        )
        with tf.compat.v1.Session(config=config) as sess:
            results = sess.run(fetches, feed_dict=feeds)
            contexts = []
            for hook, result in zip(hooks, results):
                contexts.append(
                    tf.compat.v1.train.SessionRunContext(None, sess)
                )
                hook.after_run(
                    contexts[-1],
                    tf.compat.v1.train.SessionRunValues(result, None, None),
                )

    for result in results:
        assert result.tolist() == [0.0, float(signal.SIGTERM)]
    for hook, context in zip(hooks, contexts):
        assert context.stop_requested
        assert hook.signals == {1: signal.SIGTERM}
