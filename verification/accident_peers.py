"""What the accidents of a peer leave on each kind: a worker, the ps or
the chief lost (kill -9) mid-run, the ps or a worker frozen (SIGSTOP),
another program on its port, a second job's chief on the running job's
ps (issue 57).

Each is a function (tasks, context, outcome) -> `Expected`, as in
`accident_cells`.
"""

from verification import accident_provoke as provoke
from verification.accident_expect import (
    KILLED,
    LOST,
    PS,
    PS_SYNC,
    SCRIPT,
    STEPS,
    WORKERS,
    Expected,
    another_job,
    chief_done,
    chief_gone,
    chief_left,
    end_or_past,
    files,
    finished_lines,
    matching,
    ps_lost,
    saved,
    unreachable,
    within,
)
from verification.accident_runs import WORKER_TIMEOUT_SECS


def lost_task(name):
    return lambda tasks: provoke.lost_peer(tasks, name)


def _chief_saved(tasks, outcome, state, step):
    """A cluster of workers only whose worker 1 the cell ended (state: how
    the chief's line says it, e.g. 'unreachable'): the chief ends saving
    step, the step it reached."""
    line = matching(
        outcome.lines.get("worker0", ""),
        "%s: error: lost the cluster after {N} local steps "
        "(DeadlineExceededError): %s: %s; saved %s; run the same commands on "
        "every worker to resume from it",
        SCRIPT,
        state,
        unreachable(tasks, "worker1"),
        saved(tasks, step),
    )
    return Expected(
        {"worker0": 1, "worker1": KILLED},
        {"worker0": line},
        [0, step],
        files([0, step]),
    )


def lost_worker(tasks, context, outcome):
    """kill -9 of worker 1 mid-run (docs/survival.md, docs/cluster.md)."""
    lines, lost = outcome.lines, unreachable(tasks, "worker1")
    if tasks.kind.name == WORKERS:
        step = outcome.steps[-1] if outcome.steps else -1
        return _chief_saved(tasks, outcome, "unreachable", step)
    if tasks.kind.name == PS or outcome.codes.get("worker0") == 0:
        # The chief trains on (a sync chief puts tokens in the token queue
        # for the lost worker, `cluster._LostWorkersHook`); the ps waits
        # for worker 1's word.
        return Expected(
            {"ps0": 1, "worker0": 0, "worker1": KILLED},
            {
                **finished_lines(tasks, ["worker0"]),
                "ps0": chief_done(tasks),
            },
            [0, STEPS],
            files([0, STEPS]),
        )
    # A sync chief's step may still wait out its operation timeout (1 run
    # of 9 with the tokens, 4 of 8 without): it ends naming worker 1.
    return Expected(
        {"ps0": 1, "worker0": 1, "worker1": KILLED},
        {
            "worker0": matching(lines["worker0"], LOST, SCRIPT, lost),
            "ps0": chief_gone(tasks),
        },
        [0],
        files([0]),
    )


def lost_ps(tasks, context, outcome):
    """kill -9 of the ps mid-run: every worker ends naming it, by its
    watchdog, or by its step's operation timeout when that step waited on
    the ps from before the kill (both bound by --operation_timeout_secs)."""
    lines = {
        name: ps_lost(tasks, outcome.lines.get(name, ""))
        for name in ("worker0", "worker1")
    }
    return Expected(
        {"ps0": KILLED, "worker0": 1, "worker1": 1}, lines, [0], files([0])
    )


def lost_chief(tasks, context, outcome):
    """kill -9 of the chief mid-run: worker 1 stops within its timeout,
    naming the checkpoint the job resumes from (by its watchdog, or, had
    it run the job's last step first, as it waits for the chief's save of
    it); the ps stops once the chief is gone; nothing exits 0. A sync
    worker 1's step waits on the chief, and its operation timeout, the
    watchdog's bound too, may end it first, naming the chief unreachable
    but not the checkpoint (2 runs of 4)."""
    lines, lost = outcome.lines, unreachable(tasks, "worker0")
    if tasks.kind.name == WORKERS:
        line = matching(
            lines.get("worker1", ""),
            LOST + "; run the same commands on every worker to resume from "
            "the chief's newest checkpoint",
            SCRIPT,
            lost,
        )
        return Expected(
            {"worker0": KILLED, "worker1": 1},
            {"worker1": line},
            [0],
            files([0]),
        )
    observed = lines.get("worker1", "")
    line = chief_left(tasks, observed, 0)
    if tasks.kind.name == PS_SYNC and line != observed:
        line = matching(observed, LOST, SCRIPT, lost)
    return Expected(
        {"ps0": 1, "worker0": KILLED, "worker1": 1},
        {"worker1": line, "ps0": chief_gone(tasks)},
        [0],
        files([0]),
    )


def frozen_peer(tasks, context, outcome):
    """SIGSTOP of the ps (or worker 1): every other task ends within its
    timeout naming the frozen task, stopped or stuck; in a cluster of
    workers only the chief saves the step it reached."""
    name = provoke.frozen(tasks)
    frozen, lines = unreachable(tasks, name), outcome.lines
    if tasks.kind.name == WORKERS:
        step = within(outcome.steps[-1] if outcome.steps else -1, 1, STEPS)
        return _chief_saved(
            tasks, outcome, "not responding (stopped or stuck)", step
        )
    text = (
        "%s: error: lost the cluster: %s holds its port but has not "
        "answered for {N} s: stopped or stuck"
    )
    return Expected(
        {"ps0": KILLED, "worker0": 1, "worker1": 1},
        {
            n: matching(lines.get(n, ""), text, SCRIPT, frozen)
            for n in ("worker0", "worker1")
        },
        [0],
        files([0]),
    )


def program_on_port(tasks, context, outcome):
    """Another program on the ps's port (or worker 1's): every worker ends
    at start-up, naming it (a ps cluster's worker 1 by its watchdog), and
    writes nothing."""
    other = unreachable(tasks, provoke.frozen(tasks))
    if tasks.kind.name == WORKERS:
        return Expected(
            {"worker0": 1},
            {
                "worker0": "%s: error: worker task 0: no answer from %s, not "
                "a TensorFlow server (another program holds its port)) within"
                " %d s of start-up (--operation_timeout_secs); start every "
                "worker task with the same flags, or look in its output for "
                "why it ended" % (SCRIPT, other[:-1], WORKER_TIMEOUT_SECS)
            },
            [],
            None,
        )
    chief = (
        "%s: error: worker task 0: no answer from %s within %d s of "
        "start-up (--operation_timeout_secs): not a TensorFlow server "
        "(another program holds its port); start the ps tasks, or look in "
        "their output for why they ended" % (SCRIPT, other, WORKER_TIMEOUT_SECS)
    )
    worker = matching(
        outcome.lines.get("worker1", ""),
        "%s: error: lost the cluster: %s holds its port but has not answered"
        " as a TensorFlow server for {N} s: another program listens there",
        SCRIPT,
        other,
    )
    return Expected(
        {"worker0": 1, "worker1": 1},
        {"worker0": chief, "worker1": worker},
        [],
        None,
    )


def second_job(tasks, context, outcome):
    """A second job's chief on the running job's ps is refused before it
    runs an op there, naming both jobs; the running job trains to its
    end as if nothing happened."""
    steps = outcome.steps or [-1]
    newest = within(steps[-1], STEPS, end_or_past(tasks, STEPS))
    names = ["ps0", "worker0", "worker1"]
    refused = another_job(
        "%s:%d" % (tasks.address("ps0"), tasks.ports["ps0"]),
        tasks.train_dir(tasks.chief),
        tasks.root / provoke.SECOND_JOB / "train_worker0",
    )
    return Expected(
        {**dict.fromkeys(names, 0), provoke.SECOND_CHIEF: 1},
        {**finished_lines(tasks, names), provoke.SECOND_CHIEF: refused},
        [0, newest],
        files([0, newest]),
    )
