"""The link between two hosts goes down mid-run: how it is provoked on a
kind's tasks, and what it must leave (docs/survival.md, docs/cluster.md).

The tasks run in two network namespaces joined by a veth pair
(`linked_hosts`): the ps and the chief on one host, worker 1 on the other.
The link is set down (as a pulled cable: no reset comes, the peer's port
neither answers nor refuses) once the chief logged a step; once every task
ended, the link is set up and the same commands run again.
"""

import re

from data_sets import cifar10_data
from verification import linked_hosts
from verification.accident_expect import (
    LOST,
    RESUME_ALL,
    SCRIPT,
    STEPS,
    WORKERS,
    Expected,
    chief_done,
    chief_gone,
    end_or_past,
    files,
    finished_lines,
    matching,
    nothing_to_train,
    ps_lost,
    saved,
    unreachable,
    within,
)
from verification.accident_provoke import ACCIDENT_STEP

# The host each task runs on (an index into `linked_hosts.make`'s).
HOST_OF = {"ps0": 0, "worker0": 0, "worker1": 1}
# What the names of the tasks of the first run carry in a cell's lines.
DOWN = " (link down)"


def lost_link(tasks):
    """Sets the link down once the chief logged ACCIDENT_STEP; once every
    task ended, sets it up and starts the same commands again.

    Returns:
      {"ended": {"NAME (link down)": (exit code, last line)}, "before":
      the chief's train_dir once they ended}.
    """
    hosts = linked_hosts.make()
    tasks.set_up.callback(linked_hosts.delete, hosts)
    tasks.hosts = {name: hosts[HOST_OF[name]] for name in tasks.names}
    cifar10_data.write_fake_data(str(tasks.data_dir(tasks.chief)))
    tasks.start()
    tasks.wait_for_step(tasks.chief, ACCIDENT_STEP)
    linked_hosts.set_link(hosts[0], "down")
    codes = tasks.codes()
    ended = {
        name + DOWN: (code, tasks.last_line(name))
        for name, code in codes.items()
    }
    before = tasks.folder()
    linked_hosts.set_link(hosts[0], "up")
    tasks.start()
    return {"ended": ended, "before": before}


def expect(tasks, context, outcome):
    """What the link's going down leaves: the tasks of the first run end
    as for a lost peer, each naming the task across the link; once it is
    up, the same commands resume (or, where the chief trained on to the
    end, train nothing)."""
    if tasks.kind.name == WORKERS:
        return _workers_resume(tasks, outcome)
    if outcome.codes.get("worker0" + DOWN) == 0:
        return _chief_trained_on(tasks, outcome)
    return _sync_chief_lost(tasks, outcome)


def _down(codes, lines):
    """codes and lines of the first run's tasks (name -> value), named
    as the cell names them."""
    return (
        {name + DOWN: code for name, code in codes.items()},
        {name + DOWN: line for name, line in lines.items()},
    )


def _workers_resume(tasks, outcome):
    """Both workers end naming the other; the chief first saves the last
    step it completed (the last it logged, or the one in flight whose
    all-reduce finished before the link went); the same commands resume
    from it."""
    step = _reached(tasks, outcome)
    lines = outcome.lines
    codes, down = _down(
        {"worker0": 1, "worker1": 1},
        {
            "worker0": matching(
                lines.get("worker0" + DOWN, ""),
                LOST + "; saved %s; %s from it",
                SCRIPT,
                unreachable(tasks, "worker1"),
                saved(tasks, step),
                RESUME_ALL,
            ),
            "worker1": matching(
                lines.get("worker1" + DOWN, ""),
                LOST + "; %s from the chief's newest checkpoint",
                SCRIPT,
                unreachable(tasks, "worker0"),
                RESUME_ALL,
            ),
        },
    )
    names = ["worker0", "worker1"]
    return Expected(
        {**codes, **dict.fromkeys(names, 0)},
        {**down, **finished_lines(tasks, names)},
        [0, step, STEPS],
        files([0, step, STEPS], 2),
    )


def _reached(tasks, outcome):
    """The step the chief saved when the link went down, from the steps
    the cell left ([0, it, the last]): the last the chief logged, or the
    one in flight whose update ended before the link went; else -1."""
    logged = re.findall(r": step (\d+), loss", tasks.log("worker0", 1))
    last = int(logged[-1]) if logged else -1
    return within(outcome.steps[1] if outcome.steps[2:] else -1, last, last + 1)


def _chief_trained_on(tasks, outcome):
    """The chief, beside the ps, trains to --max_steps; worker 1 ends
    naming the ps, and the ps worker 1 (docs/survival.md's kill -9 of a
    non-chief worker); the same commands train nothing, write nothing."""
    newest = outcome.steps[-1] if outcome.steps else -1
    step = within(newest, STEPS, end_or_past(tasks, STEPS))
    codes, down = _down(
        {"ps0": 1, "worker0": 0, "worker1": 1},
        {
            **finished_lines(tasks, ["worker0"]),
            "ps0": chief_done(tasks),
            "worker1": ps_lost(tasks, outcome.lines.get("worker1" + DOWN, "")),
        },
    )
    names = ["ps0", "worker0", "worker1"]
    return Expected(
        {**codes, **dict.fromkeys(names, 0)},
        {
            **down,
            **finished_lines(tasks, ["ps0"]),
            **{name: nothing_to_train(name, step, STEPS) for name in names[1:]},
        },
        [0, step],
        "unchanged",
    )


def _sync_chief_lost(tasks, outcome):
    """A sync chief's step waits out its operation timeout for worker 1's
    gradients: it ends naming worker 1; worker 1 names the ps, the ps the
    chief gone; the same commands train to --max_steps.

    The chief's queue runner waits out the same timeout: where its error
    stops the session before the step's does, the session ends as if
    asked to stop, and its saver saves the step reached (its line 'saved
    the checkpoint of step N' says so, the chief's last does not); else
    the chief saves nothing."""
    newest = outcome.steps[-1] if outcome.steps else -1
    step = within(newest, STEPS, end_or_past(tasks, STEPS))
    steps = (
        [0, _reached(tasks, outcome), step] if outcome.steps[2:] else [0, step]
    )
    codes, down = _down(
        {"ps0": 1, "worker0": 1, "worker1": 1},
        {
            "worker0": matching(
                outcome.lines.get("worker0" + DOWN, ""),
                LOST,
                SCRIPT,
                unreachable(tasks, "worker1"),
            ),
            "ps0": chief_gone(tasks),
            "worker1": ps_lost(tasks, outcome.lines.get("worker1" + DOWN, "")),
        },
    )
    names = ["ps0", "worker0", "worker1"]
    return Expected(
        {**codes, **dict.fromkeys(names, 0)},
        {**down, **finished_lines(tasks, names)},
        steps,
        files(steps, 2),
    )
