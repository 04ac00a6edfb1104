"""The equivalence runner's cells and results: each cell's outcome, its row."""

import collections

from verification.machine import cpu_info

Case = collections.namedtuple(
    "Case",
    "update all_reduce model precision towers clip_norm",
    defaults=[0.0],
)
Case.__doc__ = """One cell: --variable_update, --all_reduce_spec (None for
parameter_server), a model (`equivalence_cells.model_of`), a key of
`equivalence_cells.PRECISIONS`, the tower count, and --clip_gradients
(float, 0: no clipping)."""

Result = collections.namedtuple(
    "Result",
    "case worst name copy_gap seconds moved runs settled extremes hidden "
    "random_op",
    defaults=[None, None],
)
Result.__doc__ = """A cell's outcome.

worst: float, the largest |towers - one device| over the cell's tolerance
  (`equivalence_tolerance.errors`, <= 1 within it) of every variable of
  the one device; inf if it has none.
name: str, the variable where it is, or where a value is not finite
  and on what (`equivalence_verdicts.worst`).
copy_gap: float, the largest difference between a tower's copy and the
  variable it copies after any step (0 where the copies stay equal).
seconds: float, the cell's wall time.
moved: bool, whether the steps moved a weight of the one device.
runs: int, the one device's measuring runs (`equivalence.measured_reference`).
settled: bool, whether every variable has two runs that agreed
  (`equivalence_tolerance.tolerance`).
extremes: (float, float), the named variable's smallest and largest spread
  over the measuring runs (a largest far over the smallest: a run tipped).
hidden: None, or the weight whose tolerance would hide an update off by
  half, its tolerance and its move over the steps
  (`equivalence_tolerance.hidden_move`): the cell is not provable here.
random_op: None, or an op drawing random numbers in the one device's step
  (`equivalence_reference.random_op`): the cell is not provable here.
"""


def within(result):
    """Whether a cell moved its weights, within tolerance, copies equal."""
    return result.moved and result.worst <= 1.0 and result.copy_gap == 0.0


ROW = "%-16s %-10s %-18s %-15s %6s %4s %9s %4s %9s %8s %8s %7s  %s"


def print_header(steps, per_tower_batch, multiple):
    """The machine, what a cell trains, what its error is; the columns."""
    cpu = cpu_info()
    print("CPU: %s; flags: %s" % (cpu["model"], " ".join(cpu["flags"])))
    print(
        "Each cell: %d steps, %d examples per tower." % (steps, per_tower_batch)
    )
    print(
        "x tol: the largest |towers - one device| of a variable over its\n"
        "tolerance, %g times the spread of the one device started one ulp\n"
        "away (<= 1: ok). runs: those starts, each with another seed, until\n"
        "every variable had two runs, in any order, each within the other's\n"
        "tolerance (the largest such spread is the one held); over 2 where\n"
        "one ulp tips the steps (a ReLU input near 0 changes sign) or\n"
        "crosses a 2-byte transfer's rounding. spread lo, hi: that\n"
        "variable's smallest and largest spread over the runs; hi far over\n"
        "lo is a tip. UNSETTLED: a variable with no two runs that agreed.\n"
        "not provable here: every weight's tolerance is half its move over\n"
        "the steps or more, or the step draws random numbers (dropout). A\n"
        "NaN or an infinity is OUT, named with where it came from: the one\n"
        "device, its measuring runs or the towers." % multiple
    )
    print(
        ROW
        % (
            "update",
            "all_reduce",
            "model",
            "precision",
            "towers",
            "clip",
            "x tol",
            "runs",
            "spread lo",
            "hi",
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
            "%g" % case.clip_norm if case.clip_norm else "-",
            "%.3f" % result.worst,
            result.runs,
            "%.1e" % result.extremes[0],
            "%.1e" % result.extremes[1],
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
    if _not_provable(result):
        return "not provable here: " + _not_provable(result)
    if not within(result):
        # Infinitely out (a NaN, a variable missing, an integer that
        # differs) whatever the tolerance.
        verdict = "OUT: " + result.name
        if result.worst == float("inf"):
            return verdict
        if not result.settled:
            verdict += " (UNSETTLED)"
        if result.hidden:
            # Out of a tolerance that hides is out, but say how far the one
            # device's own runs spread: such steps may tip one variable.
            verdict += (
                "; but %s, so a variable out here may be the steps' own "
                "spread" % _hidden(*result.hidden)
            )
        return verdict
    return "ok" if result.settled else "UNSETTLED (within its widest spread)"


def _not_provable(result):
    """Why a cell that moved its weights, its copies equal, and has no
    value infinitely out (a NaN: out whatever its step draws), proves
    nothing: a step that draws random numbers, or a tolerance that hides
    (within it: a cell out of a tolerance that hides is out); "" if none."""
    if not result.moved or result.copy_gap or result.worst == float("inf"):
        return ""
    if result.random_op:
        return (
            "the step draws random numbers (%s), each tower its own, apart "
            "from the one device's: dropout's masks differ by mode; prove "
            "the model built with a dropout rate of 0" % result.random_op
        )
    return _hidden(*result.hidden) if within(result) and result.hidden else ""


def _hidden(name, held, move):
    """Why a cell is not provable: its narrowest weight's tolerance against
    its move (`equivalence_tolerance.hidden_move`; a weight moved, or the
    row says no weight moved)."""
    return (
        "every weight's tolerance is half its move over the steps or more "
        "(the one device's own runs spread that far), the narrowest %s's "
        "%.1e, %.2g times its %.1e: towers that moved every weight half as "
        "far or twice as far would pass" % (name, held, held / move, move)
    )


def print_summary(results, allow_unsettled=False):
    """The cells' count, how many failed, the slowest; returns the exit code.

    Args:
      results: list of `Result`, at least one.
      allow_unsettled: bool, whether a cell within its widest spread whose
        measuring runs never agreed may pass.

    Returns:
      int, 1 if a cell is not `within` or not provable (`_not_provable`),
      or is within but unsettled and allow_unsettled is False; else 0.
    """
    unprovable = [r for r in results if _not_provable(r)]
    out = [r for r in results if not within(r) and not _not_provable(r)]
    unsettled = [
        r
        for r in results
        if within(r) and not _not_provable(r) and not r.settled
    ]
    slowest = max(results, key=lambda r: r.seconds)
    print(
        "%d cell(s), %d out of tolerance, %d unsettled%s%s; slowest %.1f s (%s)"
        % (
            len(results),
            len(out),
            len(unsettled),
            " (allowed)" if unsettled and allow_unsettled else "",
            ", %d not provable here" % len(unprovable) if unprovable else "",
            slowest.seconds,
            " ".join(str(each) for each in slowest.case),
        )
    )
    if unprovable:
        return 1
    return 1 if out or (unsettled and not allow_unsettled) else 0
