"""What the accidents of a peer leave on each kind: a worker or the ps
lost (kill -9) mid-run.

Each is a function (tasks, context, outcome) -> `Expected`, as in
`accident_cells`.
"""

from verification import accident_provoke as provoke
from verification.accident_expect import (
    KILLED,
    LOST,
    PS,
    SCRIPT,
    STEPS,
    WORKERS,
    Expected,
    chief_done,
    chief_gone,
    files,
    finished_lines,
    matching,
    ps_lost,
    saved,
    unreachable,
)


def lost_task(name):
    return lambda tasks: provoke.lost_peer(tasks, name)


def lost_worker(tasks, context, outcome):
    """kill -9 of worker 1 mid-run (docs/survival.md, docs/cluster.md)."""
    lines, lost = outcome.lines, unreachable(tasks, "worker1")
    if tasks.kind.name == WORKERS:
        step = outcome.steps[-1] if outcome.steps else -1
        line = matching(
            lines["worker0"],
            LOST + "; saved %s; run the same "
            "commands on every worker to resume from it",
            SCRIPT,
            lost,
            saved(tasks, step),
        )
        return Expected(
            {"worker0": 1, "worker1": KILLED},
            {"worker0": line},
            [0, step],
            files([0, step]),
        )
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
