"""The product of kinds of run x accidents, and what each cell must leave.

An accident is a column: how it is provoked (`accident_provoke`), the
flags of its run, and per kind of run either what must happen (the exit
code of every task, the last line of each, the chief's checkpoint steps
and the files of its train_dir after, from docs/survival.md and
docs/cluster.md; `accident_expect`) or why it does not apply.
`KNOWN_FAILURES` names the cells today's code fails, each with the line of
issue 46 it belongs to.
"""

import functools
import signal
from typing import Callable, NamedTuple

from data_sets import cifar10_data
from multigpu.train_dir import train_dirs
from verification import accident_links as links
from verification import accident_peers as peers
from verification import accident_provoke as provoke
from verification import accident_restarts as restarts
from verification import linked_hosts
from verification.accident_expect import (
    KEPT,
    LAST_STEP,
    LOCAL,
    PS,
    PS_SYNC,
    SCRIPT,
    STEPS,
    WORKERS,
    Expected,
    chief_done,
    chief_left,
    chief_lost_at_start,
    end_or_past,
    files,
    finished_lines,
    interrupted,
    left,
    left_at,
    nothing_to_train,
    stopped_together,
    within,
)

NO_PEER = "one process has no peer"
NO_PS = "a cluster of workers only has no ps"
UNTIL_STOPPED = ("--max_steps=%d" % STEPS, "--save_checkpoint_steps=100000")
ENDING = ("--max_steps=%d" % LAST_STEP, "--save_checkpoint_steps=100000")


class Accident(NamedTuple):
    """A column: its heading, how it is provoked, its flags, and per kind
    a function (tasks, context, `accidents.Outcome`) -> `Expected`, or a
    str saying why the accident does not apply; and, for an accident that
    needs what a machine may lack, a function () -> why it cannot be
    provoked here, or None."""

    heading: str
    provoke: Callable
    flags: tuple
    expect: dict
    missing: Callable = lambda: None


def _before_step_1(tasks, context, outcome):
    """SIGTERM before step 1, to the process or worker 1."""
    if tasks.kind.name == LOCAL:
        return Expected(
            {"local": 143},
            {
                "local": "%s: interrupted (SIGTERM) before step 1; nothing was"
                " trained, and what the run wrote in %s is removed; run the "
                "same command to start" % (SCRIPT, tasks.train_dir("local"))
            },
            [],
            None,
        )
    if tasks.kind.name == WORKERS:
        # docs/cluster.md: 'a signal before the first step stops the
        # workers after step 1'.
        return Expected(
            {"worker0": 143, "worker1": 143},
            stopped_together(tasks, 1),
            [0, 1],
            files([0, 1]),
        )
    # Worker 1 holds the signal until its session starts (`interrupts`),
    # and leaves at the global step the chief has reached by then: 0 on a
    # quiet machine, a few steps on a busy one.
    return _worker_left(
        tasks, within(left_at(outcome.lines["worker1"]), 0, STEPS), outcome
    )


def _worker_left(tasks, step, outcome, end=STEPS, signum=signal.SIGTERM):
    """A ps cluster's worker 1 left at global step (signum); the others
    train on to end (`end_or_past`)."""
    newest = within(
        outcome.steps[-1] if outcome.steps else -1,
        end,
        end_or_past(tasks, end),
    )
    return Expected(
        {"ps0": 0, "worker0": 0, "worker1": 128 + signum},
        {
            **finished_lines(tasks, ["ps0", "worker0"]),
            "worker1": left(tasks, step, signum),
        },
        [0, newest],
        files([0, newest]),
    )


def _mid_run(tasks, context, outcome):
    """SIGTERM (or the signal of a SIGHUP or SIGQUIT row) after step
    ACCIDENT_STEP (or LAST_STEP - 1) was logged."""
    low = context.get("logged", LAST_STEP - 1)
    signum = context.get("signum", signal.SIGTERM)
    if tasks.kind.name in (PS, PS_SYNC):
        step = within(left_at(outcome.lines["worker1"]), low, STEPS)
        return _worker_left(tasks, step, outcome, signum=signum)
    # After the logged step; how many steps later depends on the machine's
    # speed (a quiet one runs several before the signal lands), not after
    # the run's end.
    step = within(
        outcome.steps[-1] if outcome.steps else -1, low + 1, STEPS - 1
    )
    if tasks.kind.name == WORKERS:
        return Expected(
            {"worker0": 128 + signum, "worker1": 128 + signum},
            stopped_together(tasks, step, signum),
            [0, step],
            files([0, step]),
        )
    return Expected(
        {"local": 128 + signum},
        {"local": interrupted(tasks, step, signum)},
        [0, step],
        files([0, step]),
    )


def _in_the_last_step(tasks, context, outcome):
    """SIGTERM after step LAST_STEP - 1 was logged: the last step ends,
    is saved and the run stops as interrupted; in a cluster of workers
    only, as interrupted if the last step carried the signal, else the
    signalled worker alone says the job finished."""
    if tasks.kind.name in (PS, PS_SYNC):
        step = left_at(outcome.lines["worker1"])
        return _worker_left(
            tasks, within(step, LAST_STEP - 1, LAST_STEP), outcome, LAST_STEP
        )
    if tasks.kind.name == WORKERS and outcome.codes.get("worker0") == 0:
        # docs/cluster.md: a signal in the job's last step, which no step
        # carries to the others, ends that worker only.
        return Expected(
            {"worker0": 0, "worker1": 143},
            {
                **finished_lines(tasks, ["worker0"]),
                "worker1": "%s: worker task 1 got SIGTERM in the job's last "
                "step: every worker finished at global step %d, whose "
                "checkpoint the chief (worker task 0) saved; nothing more to "
                "save" % (SCRIPT, LAST_STEP),
            },
            [0, LAST_STEP],
            files([0, LAST_STEP]),
        )
    return _mid_run(tasks, {"logged": LAST_STEP - 1}, outcome)


def _during_a_save(tasks, context, outcome):
    """SIGTERM to the chief during a save of every step's checkpoint: the
    save ends, the step is saved, the newest KEPT are kept."""
    step = within(outcome.steps[-1] if outcome.steps else -1, 1, STEPS - 1)
    steps = list(range(max(0, step - KEPT + 1), step + 1))
    line = interrupted(tasks, step)
    if tasks.kind.name == WORKERS:
        return Expected(
            {"worker0": 143, "worker1": 143},
            {
                name: text.replace("worker task 1 got", "worker task 0 got")
                for name, text in stopped_together(tasks, step).items()
            },
            steps,
            files(steps),
        )
    if tasks.kind.name == LOCAL:
        return Expected({"local": 143}, {"local": line}, steps, files(steps))
    # The ps chief: its signal saves the step it reached (its saves skip
    # the global steps worker 1 makes meanwhile). Worker 1's steps after it
    # are in no checkpoint: it stops once the chief is gone, naming that
    # checkpoint, and the ps ends naming it; where the chief's save came
    # after worker 1's last step (at the job's end, or a sync worker 1
    # whose step the chief's end cut short, `cluster.report_done`), both
    # end as at the job's end.
    step = within(
        outcome.steps[-1] if outcome.steps else -1,
        1,
        end_or_past(tasks, STEPS),
    )
    steps = outcome.steps[-KEPT:-1] + [step]
    lines = {"worker0": interrupted(tasks, step)}
    if step >= STEPS or outcome.codes.get("worker1") == 0:
        codes = {"ps0": 0, "worker0": 143, "worker1": 0}
        lines.update(finished_lines(tasks, ["ps0", "worker1"]))
    else:
        codes = {"ps0": 1, "worker0": 143, "worker1": 1}
        lines["ps0"] = chief_done(tasks)
        lines["worker1"] = chief_left(
            tasks, outcome.lines.get("worker1", ""), step
        )
    return Expected(codes, lines, steps, files(steps))


def _again(tasks, context, outcome, event_files):
    names = list(outcome.codes)
    return Expected(
        {name: 0 for name in names},
        finished_lines(tasks, names),
        [0, LAST_STEP],
        files([0, LAST_STEP], event_files),
    )


def _killed_again(tasks, context, outcome):
    """kill -9 of every task, then the same commands: they resume and
    train to --max_steps; each run wrote its event file. A ps cluster's
    chief saves the global step its session starts at, which worker 1 may
    have moved past the restored one (a sync chief takes any worker's
    gradients)."""
    expected = _again(tasks, context, outcome, 2)
    started = [step for step in outcome.steps if 0 < step < LAST_STEP]
    if tasks.kind.name in (PS, PS_SYNC) and len(started) == 1:
        steps = [0, started[0], LAST_STEP]
        expected = expected._replace(steps=steps, files=files(steps, 2))
    return expected


def _finished_again(tasks, context, outcome):
    """A finished job started again trains nothing, writes nothing."""
    expected = _again(tasks, context, outcome, 1)._replace(files="unchanged")
    chief = tasks.chief
    if tasks.kind.name == LOCAL:
        line = (
            "%s is already at step %d, at or past --max_steps=%d; "
            "nothing to train (raise --max_steps to train on)"
            % (
                tasks.train_dir(chief) / ("model.ckpt-%d" % LAST_STEP),
                LAST_STEP,
                LAST_STEP,
            )
        )
        return expected._replace(lines={chief: line})
    step = LAST_STEP
    if tasks.kind.name != WORKERS:
        # The step the first run reached (`end_or_past`).
        newest = outcome.steps[-1] if outcome.steps else -1
        step = within(newest, LAST_STEP, end_or_past(tasks, LAST_STEP))
    return expected._replace(
        lines={
            **expected.lines,
            **{
                name: nothing_to_train(name, step, LAST_STEP)
                for name in ("worker0", "worker1")
            },
        },
        steps=[0, step],
    )


def _read_only(tasks, context, outcome):
    """The chief refuses its read-only --train_dir before any work; every
    other task ends naming it."""
    chief = tasks.chief
    refused = (
        "%s: error: --train_dir=%s is on a read-only file system; pass a "
        "folder this user can write" % (SCRIPT, tasks.train_dir(chief))
    )
    if tasks.kind.name == LOCAL:
        return Expected({chief: 1}, {chief: refused}, [], "unchanged")
    lines = chief_lost_at_start(tasks, outcome)
    lines[chief] = refused
    return Expected({name: 1 for name in lines}, lines, [], "unchanged")


def _other_data(tasks, context, outcome):
    """Worker 1's data differs from the chief's: refused like a setting
    (docs/cluster.md), before step 1; in a cluster of workers only every
    worker ends, in a ps cluster worker 1 (the chief trains on)."""
    held = [
        train_dirs.with_setting(
            {}, cifar10_data.training_data(str(tasks.data_dir(name)))
        )["data_dir"]
        for name in ("worker0", "worker1")
    ]
    line = (
        "%s: error: --data_dir differs between the workers: worker task 0 has"
        ' "%s", worker task 1 has "%s"; start every worker with the same '
        "--data_dir (docs/cluster.md)" % (SCRIPT, *held)
    )
    if tasks.kind.name == WORKERS:
        return Expected(
            {"worker0": 1, "worker1": 1},
            {"worker0": line, "worker1": line},
            [],
            None,
        )
    return Expected(
        {"ps0": 0, "worker0": 0, "worker1": 1},
        {
            **finished_lines(tasks, ["ps0", "worker0"]),
            "worker1": line,
        },
        [0, LAST_STEP],
        files([0, LAST_STEP]),
    )


_ALL = {LOCAL: None, PS: None, PS_SYNC: None, WORKERS: None}


def _every(expect, **not_applying):
    """expect for every kind, but the reasons given (LOCAL=..., ...)."""
    return {
        **{kind: expect for kind in _ALL},
        **{globals()[k]: why for k, why in not_applying.items()},
    }


ACCIDENTS = {
    "start_up": Accident(
        "SIGTERM at start-up",
        provoke.start_up,
        UNTIL_STOPPED,
        _every(_before_step_1),
    ),
    "agreement": Accident(
        "SIGTERM during the agreement",
        provoke.agreement,
        UNTIL_STOPPED,
        _every(_before_step_1, LOCAL=NO_PEER + " to agree with"),
    ),
    "mid_run": Accident(
        "SIGTERM mid-run", provoke.mid_run, UNTIL_STOPPED, _every(_mid_run)
    ),
    **{
        "%s_mid_run" % signum.name.lower(): Accident(
            "%s mid-run" % signum.name,
            functools.partial(provoke.mid_run, signum=signum),
            UNTIL_STOPPED,
            _every(_mid_run),
        )
        for signum in (signal.SIGHUP, signal.SIGQUIT)
    },
    "last_step": Accident(
        "SIGTERM in the last step",
        provoke.last_step,
        ENDING,
        _every(_in_the_last_step),
    ),
    "during_save": Accident(
        "SIGTERM during a save",
        provoke.during_save,
        ("--max_steps=%d" % STEPS, "--save_checkpoint_steps=1"),
        _every(_during_a_save),
    ),
    "killed": Accident(
        "kill -9, then the same command",
        provoke.killed_then_again,
        ENDING,
        _every(_killed_again),
    ),
    "finished": Accident(
        "a finished run started again",
        provoke.finished_again,
        ENDING,
        _every(_finished_again),
    ),
    "read_only": Accident(
        "a read-only --train_dir", provoke.read_only, ENDING, _every(_read_only)
    ),
    "lost_worker": Accident(
        "kill -9 of a non-chief worker",
        peers.lost_task("worker1"),
        UNTIL_STOPPED,
        _every(peers.lost_worker, LOCAL=NO_PEER),
    ),
    "lost_ps": Accident(
        "kill -9 of the ps",
        peers.lost_task("ps0"),
        UNTIL_STOPPED,
        _every(
            peers.lost_ps,
            LOCAL=NO_PEER,
            WORKERS=NO_PS,
        ),
    ),
    "lost_link": Accident(
        "the link between two hosts goes down mid-run",
        links.lost_link,
        UNTIL_STOPPED,
        _every(links.expect, LOCAL="one process runs on one host"),
        linked_hosts.missing,
    ),
    "lost_chief": Accident(
        "kill -9 of the chief",
        peers.lost_task("worker0"),
        UNTIL_STOPPED,
        _every(peers.lost_chief, LOCAL=NO_PEER),
    ),
    "frozen_peer": Accident(
        "SIGSTOP of the ps (workers only: worker 1)",
        provoke.frozen_peer,
        UNTIL_STOPPED,
        _every(peers.frozen_peer, LOCAL=NO_PEER),
    ),
    "program_on_port": Accident(
        "another program on the ps's port (workers only: worker 1's)",
        provoke.program_on_port,
        UNTIL_STOPPED,
        _every(peers.program_on_port, LOCAL=NO_PEER),
    ),
    "second_job": Accident(
        "a second job's chief on the running job's ps",
        provoke.second_job,
        UNTIL_STOPPED,
        _every(peers.second_job, LOCAL=NO_PEER, WORKERS=NO_PS),
    ),
    "other_data": Accident(
        "other data on one worker",
        provoke.other_data,
        ENDING,
        _every(_other_data, LOCAL="one process has one data"),
    ),
    "full_disk": Accident(
        "a full disk at start",
        provoke.full_disk,
        ENDING,
        _every(restarts.full_disk),
    ),
    "stale_ps": Accident(
        "a ps left alive from an earlier job",
        provoke.stale_ps,
        UNTIL_STOPPED,
        _every(restarts.stale_ps, LOCAL="one process has no ps", WORKERS=NO_PS),
    ),
    "restarted_chief": Accident(
        "a chief started again under a running worker",
        provoke.restarted_chief,
        UNTIL_STOPPED,
        _every(
            restarts.restarted_chief,
            LOCAL=NO_PEER,
            WORKERS="a cluster of workers only ends with its chief",
        ),
    ),
    "killed_in_save": Accident(
        "kill -9 during a save, then the same command",
        provoke.killed_in_a_save,
        (*ENDING[:1], "--save_checkpoint_steps=1"),
        _every(restarts.killed_in_a_save),
    ),
}

# The cells today's code fails, 'ACCIDENT:KIND' -> the behaviour that
# fails (issue 46's line, or '(found here)'); a fix that makes one pass
# removes it here.
KNOWN_FAILURES = {}
