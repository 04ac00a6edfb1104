"""What the accidents of a start leave on each kind (issue 46's Why): a
full disk at start, a ps left alive from an earlier job, a chief started
again under a running worker, kill -9 during a save then the same command.

Each is a function (tasks, context, outcome) -> `Expected`, as in
`accident_cells`.
"""

from verification import accident_provoke as provoke
from verification.accident_expect import (
    KEPT,
    KILLED,
    LAST_STEP,
    LOCAL,
    SCRIPT,
    STEPS,
    WORKERS,
    Expected,
    another_job,
    chief_lost_at_start,
    end_or_past,
    files,
    finished_lines,
    within,
)
from verification.accident_runs import WORKER_TIMEOUT_SECS

# A chief's --learning_rate when not given, as its error line says it.
OWN_RATE = "0 (the model's own recipe)"


def _no_space(tasks):
    return (
        "%s: error: could not write %s/trainer.lock (No space left on "
        "device; 0.0 MB free on its disk); free space on its disk, then run "
        "again" % (SCRIPT, tasks.train_dir(tasks.chief))
    )


def full_disk(tasks, context, outcome):
    """The chief ends at its first write, naming the disk; every other
    task ends naming the chief; nothing is written."""
    lines = {tasks.chief: _no_space(tasks)}
    if tasks.kind.name != LOCAL:
        lines.update(chief_lost_at_start(tasks, outcome))
    return Expected(dict.fromkeys(lines, 1), lines, [], "unchanged")


def _refused(other, this):
    """A chief's line when the ps tasks hold a job of other flags."""
    return (
        "%s: error: the ps tasks hold a job started by a chief with other "
        "flags: --learning_rate (the job's chief has %s, this chief %s); "
        "start this chief with that job's flags to rejoin it, or stop every "
        "task of that job, its ps tasks too, to start a new one "
        "(docs/cluster.md)" % (SCRIPT, other, this)
    )


def stale_ps(tasks, context, outcome):
    """The new job's chief is refused before it writes anything or its
    server starts, naming both jobs; its worker 1 never takes the earlier
    chief's settings on the ps for its chief's, and ends once its wait for
    a chief that answers runs out; the ps runs on (the cell kills it)."""
    chief = another_job(
        "%s:%d" % (tasks.address("ps0"), tasks.ports["ps0"]),
        tasks.root / "train_earlier_job",
        tasks.train_dir(tasks.chief),
    )
    worker = (
        "%s: error: worker task 1: the chief (worker task 0) did not publish "
        "its settings on ps task 0 within %d s (--operation_timeout_secs); "
        "start the chief, or look in its output for why it ended"
        % (SCRIPT, WORKER_TIMEOUT_SECS)
    )
    return Expected(
        {"ps0": KILLED, "worker0": 1, "worker1": 1},
        {"worker0": chief, "worker1": worker},
        [],
        None,
    )


def restarted_chief(tasks, context, outcome):
    """Started again at another rate under a running worker: refused
    before it restores anything; with the job's flags it trains on from
    the ps's variables, saving the global step it joins at as any chief
    saves the step its session starts at, and every task ends at
    --max_steps."""
    steps = outcome.steps or [-1]
    joined = within(steps[1] if steps[1:-1] else -1, 1, STEPS - 1)
    newest = within(steps[-1], STEPS, end_or_past(tasks, STEPS))
    names = ["ps0", "worker0", "worker1"]
    other = "%s (%s)" % (tasks.chief, provoke.OTHER_RATE)
    return Expected(
        {**dict.fromkeys(names, 0), other: 1},
        {**finished_lines(tasks, names), other: _refused(OWN_RATE, "0.05")},
        [0, joined, newest],
        files([0, joined, newest], 2),
    )


def killed_in_a_save(tasks, context, outcome):
    """kill -9 of every task while the chief's save is half written, then
    the same commands: they train to --max_steps, and the half-written
    save (`model.ckpt-N_temp/`) is gone."""
    names = list(outcome.codes)
    if tasks.kind.name in (LOCAL, WORKERS):
        steps = list(range(LAST_STEP - KEPT + 1, LAST_STEP + 1))
    else:
        newest = outcome.steps[-1] if outcome.steps else -1
        steps = outcome.steps[-KEPT:-1] + [
            within(newest, LAST_STEP, end_or_past(tasks, LAST_STEP))
        ]
    return Expected(
        dict.fromkeys(names, 0),
        finished_lines(tasks, names),
        steps,
        files(steps, 2),
    )
