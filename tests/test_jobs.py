"""A ps cluster's job has an identity, and a process of another job is
refused in one line naming both; a peer is alive when its server answers,
not when its port accepts."""

import socket
import subprocess
import sys

import pytest
from helpers import ports

from multigpu import errors
from multigpu.distributed import agreement, cluster, jobs, ps
from verification.processes import REPO, SCRIPT_ENV, free_ports

HOST = socket.gethostname()


def _held(job_id, train_dir, **settings):
    return dict(
        settings,
        job={
            "id": job_id,
            "train_dir": train_dir,
            "host": HOST,
            "workers": ["127.0.0.1:2223"],
        },
    )


def test_a_chief_of_another_train_dir_is_refused_naming_both_jobs(tmp_path):
    job = jobs.identity(tmp_path / "b", ["127.0.0.1:2223"])
    with pytest.raises(ValueError) as refused:
        agreement.refuse_other_job(
            _held("0a1b", "/tmp/a", learning_rate=0.1),
            dict(learning_rate=0.1, job=job),
            "127.0.0.1:2222",
        )
    assert str(refused.value) == (
        "ps task 0 (127.0.0.1:2222) holds another job: its chief's "
        "--train_dir is /tmp/a on host %s (job 0a1b), this chief's %s on "
        "host %s (a new job); give this job ps tasks of its own "
        "(--ps_hosts), or stop every task of that job, its ps tasks too, "
        "before starting this one; to rejoin that job, start its chief with "
        "its --train_dir (docs/cluster.md)" % (HOST, tmp_path / "b", HOST)
    )


def test_a_restarted_chief_of_the_job_reads_its_id_from_its_train_dir(
    tmp_path,
):
    first = jobs.identity(tmp_path, ["127.0.0.1:2223"])
    assert first["id"] is None
    started = jobs.started(first, tmp_path)
    assert (tmp_path / "job.txt").read_text() == started["id"] + "\n"
    again = jobs.identity(tmp_path, ["127.0.0.1:2223"])
    assert again == started
    agreement.refuse_other_job(
        dict(learning_rate=0.1, max_steps=20, job=started),
        dict(learning_rate=0.1, max_steps=30, job=again),
        "127.0.0.1:2222",
    )


def test_a_cleared_train_dir_starts_another_job(tmp_path):
    started = jobs.started(jobs.identity(tmp_path, []), tmp_path)
    (tmp_path / "job.txt").unlink()
    assert not jobs.same(started, jobs.identity(tmp_path, []))


def test_a_publication_cleared_by_a_restarting_chief_is_compared_by_job():
    cleared = _held("0a1b", "/tmp/a", starting=True)
    settings = dict(learning_rate=0.1, job=cleared["job"])

    # Its settings are gone, so only the job counts; uncleared, the same
    # settings differ from the held ones.
    assert agreement.refuse_other_job(cleared, settings, "h:1") is None
    with pytest.raises(ValueError) as refused:
        agreement.refuse_other_job(_held("0a1b", "/tmp/a"), settings, "h:1")
    assert str(refused.value).startswith(
        "the ps tasks hold a job started by a chief with other flags: "
        "--learning_rate (the job's chief has "
    )


def test_a_worker_of_other_hosts_is_a_stray_and_one_of_the_same_joins():
    held = _held("0a1b", "/tmp/a")
    stray = cluster.cluster_task(
        "127.0.0.1:2222", "127.0.0.1:3223,127.0.0.1:3224", "worker", 1
    )
    assert jobs.stray_worker_line(held, stray) == (
        "worker task 1: ps task 0 (127.0.0.1:2222) holds the job of /tmp/a "
        "on host %s (job 0a1b), whose workers are 127.0.0.1:2223, not this "
        "worker's --worker_hosts 127.0.0.1:3223,127.0.0.1:3224: this worker "
        "is not one of that job's; start it with that job's --worker_hosts "
        "to join it, or give its own job ps tasks of its own (--ps_hosts) "
        "(docs/cluster.md)" % HOST
    )
    held["job"]["workers"] = ["127.0.0.1:3223", "localhost:3224"]
    assert jobs.stray_worker_line(held, stray) is None


def test_a_port_tells_a_server_from_a_stopped_task_and_another_program():
    [closed] = free_ports(1)
    assert ps.probe("127.0.0.1:%d" % closed) == ps.NO_PORT
    with ports.listening() as stopped:
        assert ps.probe(stopped) == ps.SILENT
    with ports.listening(ports.HTTP_ERROR) as other:
        assert ps.probe(other) == ps.NOT_GRPC
    with ports.listening(ports.SETTINGS_FRAME) as server:
        assert ps.probe(server) == ps.ANSWERS


# A worker's watchdog over a ps task that holds its port and says nothing.
FROZEN_PS = """
import sys, time
from multigpu import quiet_cpp_logs
from multigpu.distributed import cluster, ps
task = cluster.cluster_task(sys.argv[1], sys.argv[2], "worker", 0)
with ps.PsWatchdog(task, 1):
    time.sleep(60)
"""


def test_a_stopped_ps_ends_its_worker_in_one_line_naming_it():
    [worker] = free_ports(1)
    with ports.listening() as frozen:
        result = subprocess.run(
            [sys.executable, "-c", FROZEN_PS, frozen, "127.0.0.1:%d" % worker],
            capture_output=True,
            text=True,
            env=SCRIPT_ENV,
            cwd=REPO,
            timeout=60,
        )
    assert result.returncode == 1
    last = result.stderr.strip().split("\n")[-1]
    # The silence is first seen one look in, and outlasts 1 s a look later.
    assert last.startswith(
        "-c: error: lost the cluster: ps task 0 (%s) holds its port but has "
        "not answered for " % frozen
    )
    assert last.endswith(" s: stopped or stuck")


def test_a_worker_whose_chief_is_gone_names_the_checkpoint_to_resume_from(
    tmp_path,
):
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-53"\n'
    )
    task = cluster.cluster_task(
        "127.0.0.1:2222", "127.0.0.1:2223,127.0.0.1:2224", "worker", 1
    )
    job = _held("0a1b", str(tmp_path))["job"]
    line = ps.chief_gone(
        task,
        "the chief, worker task 0 (127.0.0.1:2223) has not accepted a "
        "connection for 20 s: ended, or its host is unreachable",
        job,
    )
    assert line == (
        "worker task 1: the chief, worker task 0 (127.0.0.1:2223) has not "
        "accepted a connection for 20 s: ended, or its host is unreachable; "
        "the steps since the chief's newest checkpoint are in no checkpoint, "
        "so this worker stops: the job resumes from the newest checkpoint in "
        "the chief's --train_dir, %s on host %s (job 0a1b): %s; start every "
        "task of the job again, the ps tasks first, then the chief (worker "
        "task 0) and the other workers, with the job's commands"
        % (tmp_path, HOST, tmp_path / "model.ckpt-53")
    )


def test_a_chief_whose_ps_port_holds_another_program_ends_naming_it():
    [worker] = free_ports(1)
    with ports.listening(ports.HTTP_ERROR) as other:
        task = cluster.cluster_task(other, "127.0.0.1:%d" % worker, "worker", 0)
        with pytest.raises(errors.TrainingError) as ended:
            agreement.held_job(task, None, 1)
    assert str(ended.value) == (
        "worker task 0: no answer from ps task 0 (%s) within 1 s of start-up "
        "(--operation_timeout_secs): not a TensorFlow server (another "
        "program holds its port); start the ps tasks, or look in their "
        "output for why they ended" % other
    )


def test_a_worker_whose_peers_port_holds_another_program_ends_naming_it():
    [worker] = free_ports(1)
    with ports.listening(ports.HTTP_ERROR) as other:
        task = cluster.cluster_task(
            "", "%s,127.0.0.1:%d" % (other, worker), "worker", 1
        )
        with pytest.raises(errors.TrainingError) as ended:
            agreement.wait_for_peers(task, 1)
    assert str(ended.value) == (
        "worker task 1: no answer from worker task 0 (%s, not a TensorFlow "
        "server (another program holds its port)) within 1 s of start-up "
        "(--operation_timeout_secs); start every worker task with the same "
        "flags, or look in its output for why it ended" % other
    )


# Worker 1 of a ps job at --max_steps=20, its chief never answering (gone
# between two looks of the watchdog, which then never saw its job), waits
# for the chief's record of step 20 on the ps, then says what it did.
SETTLED_ALONE = """
import sys
import tensorflow as tf
from multigpu import errors, quiet_cpp_logs
from multigpu.distributed import cluster, ps
task = cluster.cluster_task(sys.argv[1], sys.argv[2], "worker", 1)
ps_server = tf.distribute.Server(task.cluster, "ps", 0)
server = tf.distribute.Server(task.cluster, "worker", 1)
config = task.kind.session_config(tf.compat.v1.ConfigProto(), task)
tf.compat.v1.disable_eager_execution()
with tf.device("/job:ps/task:0"):
    step = tf.compat.v1.train.get_or_create_global_step()
with tf.compat.v1.Session(server.target, config=config) as sess:
    sess.run(step.initializer)
    sess.run(step.assign(20))
config.operation_timeout_in_ms = 1000
try:
    cluster.report_done(server, ps.done_signals(task), task, 20, config, 20, "")
except errors.TrainingError as e:
    print(e)
"""


def test_a_worker_at_max_steps_whose_chief_is_gone_stops_within_the_timeout():
    ps_port, chief, worker = free_ports(3)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SETTLED_ALONE,
            "127.0.0.1:%d" % ps_port,
            "127.0.0.1:%d,127.0.0.1:%d" % (chief, worker),
        ],
        capture_output=True,
        text=True,
        env=SCRIPT_ENV,
        cwd=REPO,
        timeout=60,
    )
    assert result.stdout.strip().split("\n")[-1] == (
        "worker task 1: the chief, worker task 0 (127.0.0.1:%d) ended before "
        "it saved global step 20; the steps since the chief's newest "
        "checkpoint are in no checkpoint, so this worker stops: the job "
        "resumes from the newest checkpoint in the chief's --train_dir; start "
        "every task of the job again, the ps tasks first, then the chief "
        "(worker task 0) and the other workers, with the job's commands" % chief
    ), result.stderr[-3000:]
