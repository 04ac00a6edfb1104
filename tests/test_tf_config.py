"""The cluster from TF_CONFIG, as Kubeflow's TFJob and tf.distribute set it."""

import json
import re
import socket
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPT_ENV, checkpoint_steps
from helpers.cluster import free_ports

from multigpu.distributed import cluster, kinds, ps, tf_config
from multigpu.flags import choices

# Seconds a test waits for a task to end before it fails.
TASK_DEADLINE_SECS = 240
# The global step the workers train to (asynchronously).
MAX_STEPS = 6

CLUSTER = {
    "ps": ["10.0.0.1:2222"],
    "chief": ["10.0.0.2:2222"],
    "worker": ["10.0.0.3:2222", "10.0.0.4:2222"],
}


def tf_config_text(task_type, index, cluster_spec=CLUSTER):
    return json.dumps(
        {"cluster": cluster_spec, "task": {"type": task_type, "index": index}}
    )


NO_FLAGS = tf_config.ClusterFlags("", "", "", 0)


@pytest.mark.parametrize(
    "task_type, index, job_name, task_index",
    [
        ("chief", 0, "worker", 0),
        ("worker", 0, "worker", 1),
        ("worker", 1, "worker", 2),
        ("ps", 0, "ps", 0),
    ],
)
def test_the_chief_is_worker_0_and_tf_config_workers_follow_it(
    task_type, index, job_name, task_index
):
    hosts = tf_config.resolve(NO_FLAGS, tf_config_text(task_type, index))

    assert hosts == tf_config.ClusterFlags(
        "10.0.0.1:2222",
        "10.0.0.2:2222,10.0.0.3:2222,10.0.0.4:2222",
        job_name,
        task_index,
    )


def test_a_tf_config_of_a_chief_and_workers_is_a_cluster_of_workers_only():
    spec = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}

    hosts = tf_config.resolve(NO_FLAGS, tf_config_text("worker", 1, spec))

    assert hosts == tf_config.ClusterFlags("", "h:1,h:2,h:3", "worker", 2)
    task = cluster.cluster_task(*hosts)
    assert (task.kind, task.num_workers, task.is_chief) == (
        kinds.WORKERS_ONLY,
        3,
        False,
    )


def test_without_a_chief_tf_config_workers_keep_their_index():
    spec = {"ps": ["h:1", "h:2"], "worker": ["h:3", "h:4"]}

    hosts = tf_config.resolve(NO_FLAGS, tf_config_text("worker", 1, spec))

    assert hosts == tf_config.ClusterFlags("h:1,h:2", "h:3,h:4", "worker", 1)


def test_flags_win_when_tf_config_is_unset_or_names_no_cluster():
    flags = tf_config.ClusterFlags("h:1", "h:2", "worker", 0)

    assert tf_config.resolve(flags, "") == flags
    assert tf_config.resolve(flags, '{"task": {}}') == flags
    assert tf_config.resolve(NO_FLAGS, "") == NO_FLAGS


def test_flags_that_agree_with_tf_config_are_accepted():
    flags = tf_config.ClusterFlags(
        "10.0.0.1:2222",
        "10.0.0.2:2222, 10.0.0.3:2222,10.0.0.4:2222",
        "worker",
        2,
    )

    assert tf_config.resolve(flags, tf_config_text("worker", 1)) == flags


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            tf_config.ClusterFlags("10.0.0.1:2222", "h:1", "worker", 0),
            "--worker_hosts=h:1 disagrees with TF_CONFIG, which gives "
            "10.0.0.2:2222,10.0.0.3:2222,10.0.0.4:2222; set the cluster in "
            "one place (unset TF_CONFIG or drop the flags)",
        ),
        (
            tf_config.ClusterFlags(
                "10.0.0.1:2222",
                "10.0.0.2:2222,10.0.0.3:2222,10.0.0.4:2222",
                "worker",
                0,
            ),
            "--task_index=0 disagrees with TF_CONFIG, which gives 2; set the "
            "cluster in one place (unset TF_CONFIG or drop the flags)",
        ),
    ],
)
def test_flags_that_disagree_with_tf_config_are_an_error(flags, message):
    with pytest.raises(ValueError) as raised:
        tf_config.resolve(flags, tf_config_text("worker", 1))

    assert str(raised.value) == message


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "{not json",
            "TF_CONFIG is not valid JSON (Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        (
            "[1, 2]",
            'TF_CONFIG is not a JSON object; expected {"cluster": {...}, '
            '"task": {"type": ..., "index": ...}}',
        ),
        (
            tf_config_text("ps", 0, {"ps": ["h:1", "h:2"]}),
            "TF_CONFIG's cluster has jobs ps; the cluster mode needs a "
            "worker or chief job",
        ),
        (
            tf_config_text("evaluator", 0, dict(CLUSTER, evaluator=["h:9"])),
            "TF_CONFIG names job(s) evaluator; the cluster mode runs only "
            "ps, worker and chief tasks",
        ),
        (
            tf_config_text("worker", 2),
            "TF_CONFIG's task index 2 is out of range: its worker job has 2 "
            "task(s)",
        ),
        (
            tf_config_text("worker", 0, dict(CLUSTER, ps=[2222])),
            'TF_CONFIG\'s ps job is [2222]; expected a list of "HOST:PORT" '
            'strings, e.g. ["localhost:2222"]',
        ),
        (
            tf_config_text("chief", 0, dict(CLUSTER, chief=["h:7", "h:8"])),
            "TF_CONFIG's chief job lists 2 tasks (h:7, h:8); a cluster has "
            "one chief: list the others under worker",
        ),
        (
            json.dumps({"cluster": ["h:1", "h:2"], "task": {"type": "ps"}}),
            'TF_CONFIG\'s cluster is ["h:1", "h:2"]; expected a JSON object, '
            'e.g. {"worker": ["HOST:PORT"]}',
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": "worker"}),
            'TF_CONFIG\'s task is "worker"; expected a JSON object, e.g. '
            '{"type": "worker", "index": 0}',
        ),
        (
            # JSON's true is no index, though Python's True == 1.
            json.dumps(
                {"cluster": CLUSTER, "task": {"type": "worker", "index": True}}
            ),
            "TF_CONFIG's task index is true; expected a whole number, e.g. 0",
        ),
        (
            # The --worker_hosts way, which would make two workers of one.
            tf_config_text("worker", 0, {"worker": ["h:1,h:2"]}),
            'TF_CONFIG\'s worker job lists "h:1,h:2"; expected one '
            '"HOST:PORT" per entry, e.g. ["h:1", "h:2"]',
        ),
    ],
)
def test_a_bad_tf_config_is_an_error_saying_what_is_wrong(text, message):
    with pytest.raises(ValueError) as raised:
        tf_config.parse(text)

    assert str(raised.value) == message


class _Flags:
    ps_hosts = worker_hosts = job_name = ""
    task_index = 0
    sync_replicas = True
    replicas_to_aggregate = 0


def test_the_cluster_task_of_a_trainer_comes_from_tf_config_alone():
    environ = {"TF_CONFIG": tf_config_text("worker", 1)}

    task = choices.cluster_task_from_flags(_Flags(), environ)

    assert (task.job_name, task.task_index, task.num_workers) == (
        "worker",
        2,
        3,
    )
    assert task.cluster.job_tasks("ps") == ["10.0.0.1:2222"]
    assert task.replicas_to_aggregate == 3
    assert not task.is_chief


def test_one_host_port_for_two_tasks_of_tf_config_names_tf_config():
    # The ps and a worker on one address; no --ps_hosts given.
    environ = {
        "TF_CONFIG": tf_config_text(
            "worker", 0, {"ps": ["h:1"], "worker": ["h:1", "h:2"]}
        )
    }

    with pytest.raises(ValueError) as raised:
        choices.cluster_task_from_flags(_Flags(), environ)

    assert str(raised.value) == (
        "TF_CONFIG's cluster lists h:1 more than once; every task needs a "
        "HOST:PORT of its own"
    )


def test_a_port_in_use_from_tf_config_is_blamed_on_tf_config():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {
            "cluster": {
                "ps": ["127.0.0.1:%d" % free_ports(1)[0]],
                "chief": ["127.0.0.1:%d" % port],
            },
            "task": {"type": "chief", "index": 0},
        }
        task = choices.cluster_task_from_flags(
            _Flags(), {"TF_CONFIG": json.dumps(config)}
        )
        with pytest.raises(ValueError) as error:
            ps.start_server(task, None)
    assert str(error.value) == (
        "TF_CONFIG's cluster: worker task 0 cannot listen on port %d of "
        "127.0.0.1:%d (Could not start gRPC server); stop what uses that "
        "port or choose another" % (port, port)
    )


def _train_from_tf_config(spec, data_dir, tmp_path):
    """Starts a trainer per task of spec (ps, chief, worker; one task
    each) with TF_CONFIG and no cluster flag, and waits for each to exit
    0: {task type: its log's text}."""
    processes, logs = {}, {}
    try:
        for task_type in ("ps", "chief", "worker"):
            logs[task_type] = tmp_path / ("%s.log" % task_type)
            with open(logs[task_type], "w") as log:
                processes[task_type] = subprocess.Popen(
                    [
                        sys.executable,
                        str(REPO / "cifar10_multi_gpu_train.py"),
                        "--fake_data",
                        "--data_dir=%s" % data_dir,
                        "--train_dir=%s" % (tmp_path / task_type),
                        "--cpu_towers",
                        "--batch_size=4",
                        "--max_steps=%d" % MAX_STEPS,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=dict(
                        SCRIPT_ENV, TF_CONFIG=tf_config_text(task_type, 0, spec)
                    ),
                    cwd=REPO,
                )
        for task_type in ("chief", "worker", "ps"):
            code = processes[task_type].wait(timeout=TASK_DEADLINE_SECS)
            assert code == 0, logs[task_type].read_text()[-3000:]
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
    return {name: log.read_text() for name, log in logs.items()}


def _local_and_global_steps(log, task):
    """(local steps, global step) a ps cluster's worker's closing line
    gives: 'Worker task N ran L local steps; global step G.', or for a
    worker that ran none, 'Trained 0 step(s) in this run, from step S to
    step G ...'."""
    ran = re.search(
        r"Worker task %d ran (\d+) local steps; global step (\d+)\.|"
        r"Trained (0) step\(s\) in this run, from step \d+ to step (\d+)"
        % task,
        log,
    )
    assert ran, log[-3000:]
    return int(ran[1] or ran[3]), int(ran[2] or ran[4])


@pytest.mark.slow
def test_a_ps_a_chief_and_a_worker_train_from_tf_config_alone(
    cifar10_data_dir, tmp_path
):
    ps_port, chief_port, worker_port = free_ports(3)
    spec = {
        "ps": ["127.0.0.1:%d" % ps_port],
        "chief": ["127.0.0.1:%d" % chief_port],
        "worker": ["127.0.0.1:%d" % worker_port],
    }
    logs = _train_from_tf_config(spec, cifar10_data_dir, tmp_path)
    # TF_CONFIG's chief is worker 0 and checkpoints; its worker 0 is the
    # suite's worker 1, which does not. Each step claims its global step:
    # the workers' local steps add up to --max_steps (a worker whose
    # session starts late may run none), and none passes it.
    ends = [
        _local_and_global_steps(logs[task_type], task)
        for task, task_type in enumerate(("chief", "worker"))
    ]
    assert sum(local for local, _ in ends) == MAX_STEPS, logs
    assert [global_step for _, global_step in ends] == [MAX_STEPS] * 2
    assert checkpoint_steps(tmp_path / "chief")[-1] == MAX_STEPS
    assert not (tmp_path / "worker").exists()
    assert "ps task 0: all 2 workers done." in logs["ps"]
