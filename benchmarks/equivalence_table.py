"""The equivalence runner's results: each cell's outcome, its row."""

import collections

Result = collections.namedtuple(
    "Result", "case worst name copy_gap seconds moved"
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
"""


def within(result):
    """Whether a cell moved its weights, within tolerance, copies equal."""
    return result.moved and result.worst <= 1.0 and result.copy_gap == 0.0


ROW = "%-16s %-10s %-12s %-15s %6s %8s %9s %7s  %s"


def print_row(result):
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
            "%.1e" % result.copy_gap,
            "%.1f" % result.seconds,
            "ok" if within(result) else "OUT: " + result.name,
        ),
        flush=True,
    )
