"""Every accident on every kind of run: what each leaves, checked.

  python -m verification.accidents            # the whole product
  python -m verification.accidents --fast     # the slice the quick tests run
  python -m verification.accidents --cells=mid_run:ps

Installed as `tf1-accidents`, with the same flags.

Over kinds of run (`kinds.KINDS`: one process, the ps cluster, with sync
replicas, workers only) x accidents (`accident_cells.ACCIDENTS`), each
cell starts the kind's tasks (cifar10_multi_gpu_train.py, one CPU tower,
the sample set, batches of 4) on 127.0.0.1, or for the lost link on two
hosts (network namespaces, `accident_links`: root only; elsewhere the
runner skips those cells, saying why), provokes the accident and checks
the exit code of every task, the last line of each, the chief's
checkpoint steps and its train_dir's files after. Prints a row per cell,
and exits 1 if a cell fails that `accident_cells.KNOWN_FAILURES` does not
list, or one it lists passes (flip it).
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import argparse
import pathlib
import re
import signal
import sys
import tempfile
import time
from subprocess import TimeoutExpired
from typing import NamedTuple

from multigpu.distributed import jobs, kinds
from verification import accident_cells
from verification.accident_runs import Tasks

KIND_IDS = {
    kinds.LOCAL.name: "local",
    kinds.PS.name: "ps",
    kinds.PS_SYNC.name: "ps_sync",
    kinds.WORKERS_ONLY.name: "workers_only",
}
# The cell of the quick tests: one process, seconds.
FAST = ("mid_run:local",)
# The cells the whole suite runs besides, one process each, few enough for
# the suite's bound: a cluster cell took 1.5 to 6 min on 2 shared cores at
# a load of 15, the whole product over an hour, and is this runner's
# (`python -m verification.accidents`).
SLOW = (
    "finished:local",
    "read_only:local",
    "last_step:local",
    "during_save:local",
    "killed_in_save:local",
)


class Outcome(NamedTuple):
    """What a cell left; fields as `accident_cells.Expected`'s."""

    codes: dict
    lines: dict
    steps: list
    files: object


def cells():
    """Every cell id, 'ACCIDENT:KIND', accidents in order, then kinds."""
    return [
        "%s:%s" % (accident, KIND_IDS[kind.name])
        for accident in accident_cells.ACCIDENTS
        for kind in kinds.KINDS
    ]


def parse(cell):
    """(the `accident_cells.Accident`, the `kinds.Kind`) of a cell id."""
    accident, kind_id = cell.split(":")
    [kind] = [k for k in kinds.KINDS if KIND_IDS[k.name] == kind_id]
    return accident_cells.ACCIDENTS[accident], kind


def listing(folder):
    """A folder's contents (path -> bytes, or None) as `files` lists it."""
    if folder is None:
        return None
    names, events = [], 0
    for name in folder:
        if name.startswith("events.out.tfevents."):
            events += 1
        else:
            names.append(re.sub(r"\.data-\d+-of-\d+$", ".data", name))
    return sorted(set(names) | {"%d event file(s)" % events})


def steps_of(folder):
    found = (
        re.fullmatch(r"model\.ckpt-(\d+)\.index", name) for name in folder or ()
    )
    return sorted(int(m[1]) for m in found if m)


def run_cell(cell, root):
    """Provokes one cell in root (an empty pathlib.Path).

    Returns:
      (`Outcome`, its `accident_cells.Expected`), or (None, why the
      accident does not apply).
    """
    accident, kind = parse(cell)
    expect = accident.expect.get(kind.name)
    if isinstance(expect, str):
        return None, expect
    if accident.missing():
        return None, accident.missing()
    tasks = Tasks(kind, root, *accident.flags)
    try:
        context = accident.provoke(tasks)
        codes = tasks.codes()
        folder = tasks.folder()
        # A task the cell killed (kill -9) has no last line of its own.
        lines = {
            name: line
            for name, line in tasks.last_lines().items()
            if codes[name] != -signal.SIGKILL
        }
        # Tasks that ended earlier in the cell: name -> (code, last line).
        for name, (code, line) in context.get("ended", {}).items():
            codes[name], lines[name] = code, line
        outcome = Outcome(codes, lines, steps_of(folder), listing(folder))
        if context.get("before") is not None and folder == context["before"]:
            outcome = outcome._replace(files="unchanged")
    finally:
        tasks.end()
    return outcome, with_job_record(kind, expect(tasks, context, outcome))


def with_job_record(kind, expected):
    """expected, whose train_dir of a ps cluster's chief holds its job's id
    too (`jobs.RECORD`), where it lists the files."""
    if (
        expected is None
        or "ps" not in kind.name
        or not isinstance(expected.files, list)
    ):
        return expected
    return expected._replace(files=sorted(expected.files + [jobs.RECORD]))


def verdict(cell, outcome, expected):
    """'ok', 'known failure', or 'FAILS'/'PASSES (flip it)' with why."""
    if outcome is None:
        return "n/a: " + expected
    wrong = [
        field
        for field in Outcome._fields
        if expected is None
        or getattr(outcome, field) != getattr(expected, field)
    ]
    known = accident_cells.KNOWN_FAILURES.get(cell)
    if wrong and known:
        return "known failure (%s): %s" % (", ".join(wrong), known)
    if wrong:
        return "FAILS: " + ", ".join(wrong)
    return "PASSES, listed as a known failure: flip it" if known else "ok"


def print_row(cell, outcome, result, seconds):
    """kind | accident | exit codes | lines | steps saved | folder | result."""
    accident, kind = parse(cell)
    if outcome is None:
        print(
            "| %s | %s | | | | | %s |" % (kind.name, accident.heading, result)
        )
        return
    print(
        "| %s | %s | %s | %s | %s | %s | %s (%.0f s) |"
        % (
            kind.name,
            accident.heading,
            " ".join("%s=%d" % item for item in sorted(outcome.codes.items())),
            " / ".join(
                "%s: %s" % item for item in sorted(outcome.lines.items())
            ),
            outcome.steps,
            outcome.files,
            result,
            seconds,
        )
    )


def unprovoked(cell, error):
    """The result of a cell that did not run as written (a task ended
    first, a line never came, a task did not end)."""
    said = str(error).strip().split("\n")
    why = "did not run as written: %s" % " ... ".join(said[:1] + said[1:][-1:])
    known = accident_cells.KNOWN_FAILURES.get(cell)
    return "known failure (%s): %s" % (why, known) if known else "FAILS: " + why


def failed(result):
    return result.startswith(("FAILS", "PASSES"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--fast", action="store_true", help="only the quick tests' cells"
    )
    parser.add_argument(
        "--cells", default="", help="comma-separated ACCIDENT:KIND cells"
    )
    args = parser.parse_args(argv)
    chosen = (
        args.cells.split(",")
        if args.cells
        else (FAST if args.fast else cells())
    )
    unknown = [cell for cell in chosen if cell not in cells()]
    if unknown:
        parser.error(
            "--cells: no cell %s; a cell is ACCIDENT:KIND, an accident of %s "
            "and a kind of %s"
            % (
                ", ".join(unknown),
                ", ".join(accident_cells.ACCIDENTS),
                ", ".join(KIND_IDS.values()),
            )
        )
    print(
        "| kind | accident | exit codes | last lines | steps saved | "
        "folder | result |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failures = 0
    for cell in chosen:
        start = time.time()
        with tempfile.TemporaryDirectory() as root:
            try:
                outcome, expected = run_cell(cell, pathlib.Path(root))
                result = verdict(cell, outcome, expected)
            except (AssertionError, RuntimeError, TimeoutExpired) as e:
                outcome, result = None, unprovoked(cell, e)
        failures += failed(result)
        print_row(cell, outcome, result, time.time() - start)
        sys.stdout.flush()
    print("%d cell(s), %d failing" % (len(chosen), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
