"""The equivalence runner's tolerance, measured per cell and per variable.

Two computations of a cell are equally correct when each rounds every
value the towers compute with to one of its two neighbours in the compute
dtype. The runner trains the one device from the cell's start, and again
from that start with every value moved by one unit in the last place of
the compute dtype (up or down at random: `moved_by_one_ulp`). How far the
second lands from the first, per variable (`spreads`), is what rounding
alone does to that variable through the cell's steps, its optimizer and
its batch norm; the towers are held to MULTIPLE times it (`errors`).

Why that bounds the towers: they compute what the one device computes,
but sum the slices' float32 gradients in another order, which moves a
sum by about one float32 ulp. In float32 that is the measuring reference's
own move; in float16 it changes a weight's float16 cast only where the
float32 sums straddle a rounding boundary, one cast in thousands, where
the measuring reference changes every cast. An integer variable (the
global step, the loss scale's counters) must be bit-identical on the
towers; a float one may always differ by MULTIPLE float32 ulps of its
largest value (the rounding of the value itself, which the measuring run
can happen to repeat exactly: a loss average, the loss scale).

One measuring run is not enough where one ulp changes a discrete choice
of the steps. A deep ReLU net has units within an ulp's effect of 0, and
a move that flips one changes a gradient's sum over the batch by percents
(ResNet-20, parameter_server float32 on 2 towers, seeds 1 to 12: 6 runs
tip one unit alike, 2 another, 4 none; a tipped run's momentum up to
54,000 times a smooth one's). A gradient transfer in 2 bytes rounds each
slice's gradient to float16, and a one-ulp move crosses that rounding in
a few elements of some runs and not others: ResNet-20 workers_only
collective_float16 float32 on 2 workers, seeds 1 to 11: 8 to 25
variables, other ones each time (a batch norm's betas and gammas, their
momentum and averages), differ between consecutive runs by 12 to 4,096
times (a momentum of one float16 ulp of a gradient, 2^-14, or 1.5e-8);
no two of its 12 runs agree in every variable, and seed 12 tips. Whether
a run tips or crosses is a draw, and the towers' summation order is one
more. So the runner adds measuring runs, each moved with another seed,
until every variable has two runs, in whatever order they came, whose
spreads `agree` (each within MULTIPLE times the other), at most
MAX_RUNS, and holds each variable to the largest of its spreads that
agrees with another run's (`tolerance`): a width is held only when drawn
twice. A run that tips and one that does not disagree, so a tip-wide
run cannot lend its width to a smooth one: a tip then a smooth run does
not settle (the rule before the last, a run within the tolerance of
those before it, settled there at 2 on the tip's width, where a gap
3,000,000 times the smooth noise scored 0.75); a tip, then two smooth
runs, settles on the smooth width, and smooth, tip, tip, or tip, smooth,
tip, on the tip's. The rule before this one, two whole runs in a row
that agree in every variable, left the float16 transfer cell UNSETTLED
after 8 runs; per variable it settles at 3 to 5 (200 draws of 8 of its
12 runs), and ResNet-20's float32 cells on 2 towers, which that rule
settled at 8 on two runs that tipped alike, at 3, their spreads 31 times
narrower in the median variable (wider in 16 of 255, by 1.2 at most;
`python -m verification.equivalence --models=resnet20` shows the runs).
Not taken: whole runs in any order (no two of the 66 pairs of those 12
runs agree, so more runs would not settle it either); measuring runs
whose ring rounds every float16 cast to its other neighbour (as wide as
the transfer's bugs: the layers model's transfer rounded after the sum
then lands 0.069 tolerances out, 512 to 1,948 under this rule).
A smooth cell settles at 2 on the larger of its two spreads, as before.
A row shows the named variable's smallest spread beside its largest
(`extremes`). A cell with a variable whose runs never agree is
unsettled, which the runner reports apart from ok and out. No bug of
the towers can widen a spread: the measuring runs are the one device's
alone.
"""

import numpy as np

# The towers' |difference| allowed, in spreads. A bound, not a fit: each
# of the STEPS (3) steps rounds the towers' float32 sums differently once
# more, each time by about the measuring run's one move at the start, and
# the measuring run's random directions can partly cancel: 2 x 3 = 6,
# taken up to the next power of two. Measured on 2 AMD EPYC cores (AVX2):
# every variable of every cell run within 2 spreads but the losses'
# averages of ResNet-20 float16 on 4 towers, 4.5 (the closest, on one
# measuring run); ResNet-56's whole product within 0.65; the planted bugs
# 675 to 74,000,000 spreads in the fast slice, 4,700 to 5,000 in
# ResNet-56's cells that tip.
MULTIPLE = 8.0
# Measuring runs at most, each one more training of the one device: a cap
# on cost. A smooth cell settles at 2; one whose runs tip or cross a
# transfer's rounding by turns when each variable has drawn a width twice:
# by the third run for a variable of two widths.
MAX_RUNS = 8
# The smallest change of a weight's move over the steps that the runner
# must see: a rate counted from one tower's batch on 2 towers halves it;
# gradients summed, not averaged, double it. A tolerance of this fraction
# of a weight's move or more (a reference whose own runs spread that
# widely: a model that diverges, a float16 one at its limits) would hide
# them, so a cell where every weight's tolerance is that wide is not
# provable (`hidden_move`). Measured on the fast slice's cells but the
# one across workers: the narrowest weight's tolerance is 3.9e-7 to 0.013
# of its move; a single weight's up to 5.4 times it (the layers model's
# batch-norm gamma in float16 fixed, which moves 1.4e-3 in 3 steps, under
# 2 float16 ulps of 1.0).
HIDDEN_FRACTION = 0.5


def moved_by_one_ulp(values, compute_dtype, seed=1):
    """Every value moved by one ulp of compute_dtype, up or down at random.

    Args:
      values: dict name -> float32 array, the cell's start.
      compute_dtype: a numpy float dtype, e.g. np.float16.
      seed: int, draws the directions.

    Returns:
      dict name -> float32 array of the same shapes.
    """
    rng = np.random.default_rng(seed)
    moved = {}
    for name, value in values.items():
        ulp = np.spacing(np.abs(value).astype(compute_dtype))
        direction = rng.choice([-1.0, 1.0], size=np.shape(value))
        moved[name] = (value + direction * ulp.astype(np.float32)).astype(
            value.dtype
        )
    return moved


def spreads(reference, measuring):
    """Per variable, how far two equally correct computations differ.

    The largest |measuring - reference| over the variable's elements, and
    at least one float32 ulp of its largest |value| (the rounding of the
    value itself, which the measuring run may happen to repeat exactly);
    0 for an integer variable, which the towers must match exactly even
    where a measuring run's differs (a loss scale's counter after an
    overflow that the moved start tipped).

    Returns:
      dict name -> float.
    """
    result = {}
    for name, expected in reference.items():
        if not np.issubdtype(np.asarray(expected).dtype, np.floating):
            result[name] = 0.0
            continue
        largest = np.max(np.abs(expected), initial=0.0)
        result[name] = max(
            _largest_gap(measuring[name], expected),
            float(np.spacing(np.float32(largest))),
        )
    return result


def agree(spread, other):
    """Whether two runs' spreads of a variable each lie within MULTIPLE
    times the other: symmetric, so a run that tipped a ReLU and one that
    did not disagree whichever came first.

    Args:
      spread, other: float, one variable's `spreads` in two runs.

    Returns:
      bool.
    """
    return spread <= MULTIPLE * other and other <= MULTIPLE * spread


def tolerance(runs):
    """The spreads the towers are held to, and whether they settled.

    Per variable, over every run so far (in any order): the largest spread
    that `agree`s with another run's, so a width held was drawn twice.

    Args:
      runs: list of dict name -> float, each measuring run's `spreads`; at
        least one.

    Returns:
      spread: dict name -> float: per variable, the largest spread that
        agrees with another run's; where none does, the largest of every
        run (the widest, which an unsettled cell is reported beside).
      settled: bool, whether every variable has two runs that agree.
    """
    spread, settled = {}, True
    for name in runs[0]:
        each = [run[name] for run in runs]
        agreeing = [
            one
            for i, one in enumerate(each)
            if any(agree(one, other) for other in each[:i] + each[i + 1 :])
        ]
        spread[name] = max(agreeing or each)
        settled = settled and bool(agreeing)
    return spread, settled


def extremes(runs):
    """Per variable, its smallest and largest spread over the runs.

    Returns:
      dict name -> (float, float); a largest far over the smallest is a
      run that tipped.
    """
    return {
        name: (min(run[name] for run in runs), max(run[name] for run in runs))
        for name in runs[0]
    }


def errors(values, reference, spread):
    """Each variable's |towers - one device|, in tolerances.

    Args:
      values: dict name -> array, the towers' variables after the steps.
      reference: dict name -> array, the one device's.
      spread: `spreads` of the reference.

    Returns:
      dict name -> float: the largest |values - reference| over the
      variable's elements divided by MULTIPLE x its spread (<= 1 within
      tolerance); 0 or inf for a spread of 0 (bit-equal or not); inf for
      a variable the towers lack, and where a value or the spread is not
      finite (a NaN compares with nothing: `max` would pass over it).
    """
    result = {}
    for name, expected in reference.items():
        if name not in values:
            result[name] = float("inf")
            continue
        gap = _largest_gap(values[name], expected)
        if not np.isfinite(gap) or not np.isfinite(spread[name]):
            result[name] = float("inf")
        elif spread[name] > 0:
            result[name] = gap / (MULTIPLE * spread[name])
        else:
            result[name] = 0.0 if gap == 0 else float("inf")
    return result


def not_finite(values):
    """The first variable (in values' order) holding a NaN or an infinity.

    Args:
      values: dict name -> array or float.

    Returns:
      (name, "nan" or "inf"), "nan" if it holds both; None if every
      floating value is finite.
    """
    for name, value in values.items():
        array = np.asarray(value)
        if not np.issubdtype(array.dtype, np.floating):
            continue
        if np.any(np.isnan(array)):
            return name, "nan"
        if np.any(np.isinf(array)):
            return name, "inf"
    return None


def hidden_move(initial, reference, spread):
    """The weight whose tolerance is narrowest against its move over the
    steps, if even it is HIDDEN_FRACTION of that move or more.

    A weight's move is the largest |after the steps - start| of its
    elements on the one device; its tolerance MULTIPLE times its spread.
    Where every weight's tolerance is HIDDEN_FRACTION of its move or more,
    towers that moved every weight HIDDEN_FRACTION less or more (a rate
    counted from one of 2 towers' batches) would pass: the cell proves
    nothing. One weight that can show it is enough for such a bug of the
    whole step; a bug of one weight shows only in that weight's
    tolerance, which the row's spreads give for the worst one.

    Args:
      initial: dict name -> array, the weights' start (none: None).
      reference: dict name -> array, the one device's after the steps.
      spread: `tolerance`'s spreads.

    Returns:
      None, or (name, tolerance, move), floats.
    """
    narrowest = None
    for name, start in initial.items():
        move = _largest_gap(reference[name], start)
        held = MULTIPLE * spread[name]
        ratio = held / move if move else float("inf")
        if narrowest is None or ratio < narrowest[0]:
            narrowest = (ratio, name, held, move)
    if narrowest is None or narrowest[0] < HIDDEN_FRACTION:
        return None
    return narrowest[1:]


def _largest_gap(a, b):
    """max |a - b| in float64 (0 for empty arrays)."""
    gap = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return float(np.max(gap, initial=0.0))
