"""The equivalence runner's cells and results: each cell's outcome, its row."""

import collections

from benchmarks import common

Case = collections.namedtuple(
    "Case", "update all_reduce model precision towers"
)
Case.__doc__ = """One cell: --variable_update, --all_reduce_spec (None for
parameter_server), a model (`equivalence_cells.model_of`), a key of
`equivalence_cells.PRECISIONS`, the tower count."""

Result = collections.namedtuple(
    "Result", "case worst name copy_gap seconds moved runs settled"
)
Result.__doc__ = """A cell's outcome.

worst: float, the largest |towers - one device| over the cell's tolerance
  (`equivalence_tolerance.errors`, <= 1 within it) of every variable of
  the one device; inf if it has none.
name: str, the variable where it is.
copy_gap: float, the largest difference between a tower's copy and the
  variable it copies after any step (0 where the copies stay equal).
seconds: float, the cell's wall time.
moved: bool, whether the steps moved a weight of the one device.
runs: int, the one device's measuring runs (`equivalence.measured_reference`).
settled: bool, whether the last fitted the tolerance of those before it.
"""


def within(result):
    """Whether a cell moved its weights, within tolerance, copies equal."""
    return result.moved and result.worst <= 1.0 and result.copy_gap == 0.0


ROW = "%-16s %-10s %-18s %-15s %6s %9s %4s %9s %7s  %s"


def print_header(steps, per_tower_batch, multiple):
    """The machine, what a cell trains, what its error is; the columns."""
    cpu = common.cpu_info()
    print("CPU: %s; flags: %s" % (cpu["model"], " ".join(cpu["flags"])))
    print(
        "Each cell: %d steps, %d examples per tower." % (steps, per_tower_batch)
    )
    print(
        "x tol: the largest |towers - one device| of a variable over its\n"
        "tolerance, %g times the largest spread of the one device started\n"
        "one ulp away (<= 1: ok). runs: those starts, each with another seed,\n"
        "until one landed within the tolerance of those before it; over 2\n"
        "where one ulp tips the steps (a ReLU input near 0 changes sign),\n"
        "and the tolerance is then as wide as that tip." % multiple
    )
    print(
        ROW
        % (
            "update",
            "all_reduce",
            "model",
            "precision",
            "towers",
            "x tol",
            "runs",
            "copy gap",
            "seconds",
            "result",
        )
    )


def print_row(result):
    """One cell's row, its failure named: the variable or what is wrong."""
    case = result.case
    print(
        ROW
        % (
            case.update,
            case.all_reduce or "-",
            case.model,
            case.precision,
            case.towers,
            "%.3f" % result.worst,
            result.runs,
            "%.1e" % result.copy_gap,
            "%.1f" % result.seconds,
            _verdict(result),
        ),
        flush=True,
    )


def _verdict(result):
    if not result.moved:
        return "OUT: no weight moved"
    if result.copy_gap:
        return "OUT: a copy differs from its variable"
    verdict = "ok" if within(result) else "OUT: " + result.name
    if not result.settled:
        verdict += " (its tolerance unsettled)"
    return verdict


def print_summary(results):
    """The cells' count, how many failed, the slowest; returns the exit code.

    Args:
      results: list of `Result`, at least one.

    Returns:
      int, 1 if a cell is not `within`, else 0.
    """
    failed = [r for r in results if not within(r)]
    slowest = max(results, key=lambda r: r.seconds)
    print(
        "%d cell(s), %d out of tolerance; slowest %.1f s (%s)"
        % (
            len(results),
            len(failed),
            slowest.seconds,
            " ".join(str(each) for each in slowest.case),
        )
    )
    return 1 if failed else 0
