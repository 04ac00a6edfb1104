"""What each accident must leave on each kind, from docs/survival.md and
docs/cluster.md: a function (tasks, context, outcome) -> `Expected` per
kind, or a str saying why the accident does not apply.

A step the accident lands on by timing (the step a signal stops) is read
from what the cell left, after checking that it is one the docs allow;
outside them the expected value is -1, which nothing leaves.
"""

import re
import signal
import socket
from typing import NamedTuple

from multigpu.distributed import jobs, kinds
from multigpu.graph import step_optimizer
from verification.accident_runs import SCRIPT

LOCAL, PS, PS_SYNC, WORKERS = (k.name for k in kinds.KINDS)
# The files of a train_dir the chief trained in, but its checkpoints and
# event files (`files`).
RECORDS = ("checkpoint", "data.txt", "graph.pbtxt", "model.txt", "trainer.lock")
RESUME_ALL = "run the same commands on every worker to resume"
KILLED = -signal.SIGKILL  # The exit code of a task the cell killed.
# The saver's max_to_keep.
KEPT = 5
STEPS = 20  # --max_steps of a run the accident cuts short.
LAST_STEP = 6  # --max_steps of the runs that end there.


class Expected(NamedTuple):
    """What one cell must leave.

    codes: task name -> exit code. lines: task name -> its last line.
    steps: the chief's checkpoint steps, oldest first. files: the chief's
    train_dir as `files` lists it; None: no folder; 'unchanged': its bytes
    as before the accident.
    """

    codes: dict
    lines: dict
    steps: list
    files: object


def files(steps, event_files=1):
    """A train_dir's names: RECORDS, each checkpoint's 'model.ckpt-N.data'
    (its shards as one), '.index' and '.meta', and 'N event file(s)'."""
    names = list(RECORDS) + ["%d event file(s)" % event_files]
    for step in steps:
        names += [
            "model.ckpt-%d.%s" % (step, s) for s in ("data", "index", "meta")
        ]
    return sorted(names)


def another_job(ps_address, held_train_dir, train_dir):
    """The line of a new job's chief (of train_dir) on ps tasks that hold
    the job of held_train_dir, on this host."""
    host = socket.gethostname()
    return (
        "%s: error: ps task 0 (%s) holds another job: its chief's "
        "--train_dir is %s on host %s (job %s), this chief's %s on host %s "
        "(a new job); give this job ps tasks of its own (--ps_hosts), or "
        "stop every task of that job, its ps tasks too, before starting this "
        "one; to rejoin that job, start its chief with its --train_dir "
        "(docs/cluster.md)"
        % (
            SCRIPT,
            ps_address,
            held_train_dir,
            host,
            jobs.recorded_id(held_train_dir),
            train_dir,
            host,
        )
    )


def saved(tasks, step):
    return tasks.train_dir(tasks.chief) / ("model.ckpt-%d" % step)


def interrupted(tasks, step, signum=signal.SIGTERM):
    """One process's (or a ps chief's) line after signum at step."""
    return (
        "%s: interrupted (%s) at step %d; saved %s; run the same command to "
        "resume"
        % (SCRIPT, signal.Signals(signum).name, step, saved(tasks, step))
    )


def stopped_together(tasks, step, signum=signal.SIGTERM):
    """The workers' lines, a cluster of workers only, worker 1 signalled."""
    head = "%s: worker task 1 got %s: every worker stopped at step %d; " % (
        SCRIPT,
        signal.Signals(signum).name,
        step,
    )
    return {
        "worker0": head + "saved %s; %s" % (saved(tasks, step), RESUME_ALL),
        "worker1": head + "the chief (worker task 0) saved the checkpoint of"
        " step %d; %s" % (step, RESUME_ALL),
    }


def left(tasks, step, signum=signal.SIGTERM):
    """Worker 1's line once it left a ps cluster at global step."""
    sync = (
        ", each global step averaging --replicas_to_aggregate=2 "
        "gradients of the workers left"
        if tasks.kind.name == PS_SYNC
        else ""
    )
    return (
        "%s: worker task 1 interrupted (%s) at global step %d and left the "
        "cluster; the chief (worker task 0) and the other workers train on "
        "without it%s, and the chief saves the checkpoints; run the same "
        "command to rejoin" % (SCRIPT, signal.Signals(signum).name, step, sync)
    )


def left_at(line):
    """The global step a 'left the cluster' line names, or -1."""
    found = re.search(r"at global step (\d+) and left", line)
    return int(found[1]) if found else -1


def finished_lines(tasks, names):
    """The last lines of tasks that trained to the end."""
    lines = {
        "local": "  tensorboard --logdir=%s" % tasks.train_dir("local"),
        "worker0": "  tensorboard --logdir=%s" % tasks.train_dir("worker0"),
        "worker1": "Checkpoints and event logs: the chief's (worker 0's) "
        "--train_dir.",
        "ps0": "ps task 0: all 2 workers done.",
    }
    return {name: lines[name] for name in names}


def within(step, low, high):
    return step if low <= step <= high else -1


def end_or_past(tasks, end):
    """The last step a ps cluster's job of --max_steps=end may reach: end
    where each worker's step claims its global step
    (`step_optimizer.claiming`), else one past it (another worker's last
    step may land after the chief's)."""
    claims = tasks.kind.step_optimizer is step_optimizer.claiming
    return end + (0 if claims else 1)


def unreachable(tasks, name):
    """'JOB task N (ADDRESS)' of the task name, as lost-peer lines say."""
    job, index = name[:-1], int(name[-1])
    hosts = dict(flag[2:].split("=") for flag in tasks.cluster_flags)
    address = hosts["%s_hosts" % job].split(",")[index]
    return "%s task %d (%s)" % (job, index, address)


def chief_gone(tasks):
    """The ps's line once the chief is gone and worker 1 silent."""
    return (
        "%s: error: ps task 0: the chief, %s, is gone: its port has not "
        "answered for --operation_timeout_secs=60, and no word from %s; the "
        "ps stops"
        % (SCRIPT, unreachable(tasks, "worker0"), unreachable(tasks, "worker1"))
    )


# How worker 1 says its chief is gone (`chief_left`): by its watchdog,
# or, had it run the job's last step first, as it waits for the chief's
# save of that step (`cluster.report_done`).
CHIEF_GONE = (
    "has not accepted a connection for {N} s: ended, or its host is "
    "unreachable",
    "ended before it saved global step {N}",
)


def chief_left(tasks, observed, step):
    """Worker 1's line once its chief is gone: observed if it is one of
    CHIEF_GONE's (but for their counts), naming the chief's newest
    checkpoint of step; else the first."""
    train_dir = tasks.train_dir(tasks.chief)
    lines = [
        matching(
            observed,
            "%s: error: worker task 1: the chief, %s " + how + "; the steps "
            "since the chief's newest checkpoint are in no checkpoint, so "
            "this worker stops: the job resumes from the newest checkpoint "
            "in the chief's --train_dir, %s on host %s (job %s): %s; start "
            "every task of the job again, the ps tasks first, then the chief "
            "(worker task 0) and the other workers, with the job's commands",
            SCRIPT,
            unreachable(tasks, "worker0"),
            train_dir,
            socket.gethostname(),
            jobs.recorded_id(train_dir),
            train_dir / ("model.ckpt-%d" % step),
        )
        for how in CHIEF_GONE
    ]
    return observed if observed in lines else lines[0]


def chief_done(tasks):
    """The ps's line once the chief is done and worker 1 silent."""
    return (
        "%s: error: ps task 0: the chief (worker task 0) is done, and %s did "
        "not say it was done within --operation_timeout_secs=60; the ps stops"
        % (SCRIPT, unreachable(tasks, "worker1"))
    )


def nothing_to_train(name, step, max_steps):
    """A cluster worker's line when the job is at or past max_steps."""
    return (
        "worker task %s: the job is already at global step %d, at or past "
        "--max_steps=%d; nothing to train (raise --max_steps on every task "
        "to train on)" % (name[-1], step, max_steps)
    )


def matching(observed, text, *args):
    """observed if it is the line text % args but for any count where
    text has {N} and any error's name where it has {E}, else text % args:
    exact but for the steps counted and the error a timing picks."""
    text %= args
    pattern = (
        re.escape(text)
        .replace(re.escape("{N}"), r"\d+")
        .replace(re.escape("{E}"), r"\w+Error")
    )
    return observed if re.fullmatch(pattern, observed) else text


# A worker's line once a peer is lost: {N} local steps; the task lost.
LOST = (
    "%s: error: lost the cluster after {N} local steps "
    "(DeadlineExceededError): unreachable: %s"
)


def chief_lost_at_start(tasks, outcome):
    """The lines of the other tasks of a cluster whose chief ended before
    step 1: worker 1 names it, the ps (if any) stops."""
    lost = unreachable(tasks, "worker0")
    if tasks.kind.name == WORKERS:
        # The chief's end cancels worker 1's start-up copy, or its session.
        return {
            "worker1": matching(
                outcome.lines.get("worker1", ""),
                LOST.replace("DeadlineExceededError", "{E}").replace("{N}", "0")
                + "; run the same commands on every worker to resume from the"
                " chief's newest checkpoint",
                SCRIPT,
                lost,
            )
        }
    # The ps names the chief as gone, or as never connected if none of its
    # looks at the ports (`ps.WATCHDOG_INTERVAL_SECS` apart) came
    # in the seconds its server listened before it ended.
    never = (
        "%s: error: no connection from %s within --operation_timeout_secs="
        "60; start every worker task, or raise the timeout" % (SCRIPT, lost)
    )
    ps_line = outcome.lines.get("ps0")
    return {
        "worker1": LOST.replace("{N}", "0") % (SCRIPT, lost),
        "ps0": ps_line if ps_line == never else chief_gone(tasks),
    }


def ps_lost(tasks, observed):
    """A worker's line once the ps is lost: observed if it names it by its
    step's operation timeout (a step that waited on the ps from before),
    else the line of its watchdog (both bound by --operation_timeout_secs).
    """
    lost = unreachable(tasks, "ps0")
    if matching(observed, LOST, SCRIPT, lost) == observed:
        return observed
    return "%s: error: lost the cluster: unreachable: %s" % (SCRIPT, lost)
