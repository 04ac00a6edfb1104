"""The equivalence runner's tolerance: spreads, errors, the runs to settle."""

import contextlib

import numpy as np
import pytest

from verification import equivalence, equivalence_table
from verification import equivalence_tolerance as tolerance

CASE = equivalence_table.Case(
    "parameter_server", None, "tutorial", "float32", 2
)


def test_moving_by_one_ulp_moves_each_value_by_its_float16_spacing():
    values = {"w": np.full([1000], 1.5, np.float32)}

    moved = tolerance.moved_by_one_ulp(values, np.float16)["w"]

    # float16 spacing at 1.5 (in [1, 2)) is 2^-10; both directions drawn.
    assert moved.dtype == np.float32
    np.testing.assert_array_equal(np.abs(moved - 1.5), 2.0**-10)
    assert 400 < np.sum(moved > 1.5) < 600


def test_moving_by_one_ulp_in_float32_moves_by_the_float32_spacing():
    values = {"w": np.full([10], -3.0, np.float32)}

    moved = tolerance.moved_by_one_ulp(values, np.float32)["w"]

    np.testing.assert_array_equal(np.abs(moved + 3.0), 2.0**-22)


def test_a_spread_is_the_largest_gap_at_least_a_float32_ulp_and_0_for_an_int():
    reference = {
        "moved": np.array([1.0, -2.0], np.float32),
        "same": np.array([1.0, -2.0], np.float32),
        "count": np.array(3, np.int64),
    }
    measuring = {
        "moved": np.array([1.0, -2.5], np.float32),
        "same": np.array([1.0, -2.0], np.float32),
        "count": np.array(4, np.int64),
    }

    spread = tolerance.spreads(reference, measuring)

    # One float32 ulp of 2.0 is 2^-22; an integer has no rounding, and the
    # towers must match the reference's even where a measuring run's differs.
    assert spread == {"moved": 0.5, "same": 2.0**-22, "count": 0.0}


def test_an_error_is_the_gap_in_multiples_of_the_spread():
    reference = {"w": np.array([1.0, 2.0]), "count": np.array(3)}
    spread = {"w": 0.25, "count": 0.0}

    errors = tolerance.errors(
        {"w": np.array([1.0, 3.0]), "count": np.array(3)}, reference, spread
    )

    assert errors == {"w": 1.0 / (tolerance.MULTIPLE * 0.25), "count": 0.0}


def test_an_integer_off_by_one_and_a_missing_variable_are_infinitely_out():
    reference = {"w": np.array([1.0]), "count": np.array(3)}
    spread = {"w": 0.01, "count": 0.0}

    errors = tolerance.errors({"count": np.array(4)}, reference, spread)

    assert errors == {"w": float("inf"), "count": float("inf")}


def test_a_nan_of_the_towers_is_out_of_any_tolerance():
    reference = {"w": np.array([1.0, 2.0])}

    errors = tolerance.errors(
        {"w": np.array([1.0, np.nan])}, reference, {"w": 0.25}
    )

    # Not within (<= 1), whichever way a NaN reads: NaN and inf are not.
    assert not errors["w"] <= 1.0


def test_two_spreads_agree_when_each_is_within_8_times_the_other():
    assert tolerance.agree(1.0, 7.5) and tolerance.agree(7.5, 1.0)
    assert not tolerance.agree(1.0, 8.5)
    assert not tolerance.agree(8.5, 1.0)


# A smooth run's spread (one float32 ulp of 1.0) and a run that tipped a
# ReLU: 500,000 times as far, where the rule of a run within the tolerance
# of those before it held a towers' gap of 3,000,000 smooth spreads to be
# 0.75 of a tolerance, ok.
SMOOTH = 2.0**-23
TIP = 500_000 * SMOOTH


@pytest.mark.parametrize("order", [[TIP, SMOOTH], [SMOOTH, TIP]])
def test_a_tip_and_a_smooth_run_do_not_settle_in_either_order(order):
    runs = [{"w": each} for each in order]

    spread, settled = tolerance.tolerance(runs)

    # Unsettled: held to the widest, which its row shows beside the smallest.
    assert (spread, settled) == ({"w": TIP}, False)
    assert tolerance.extremes(runs) == {"w": (SMOOTH, TIP)}


def test_two_runs_that_agree_hold_the_larger_and_not_a_run_alone():
    runs = [{"w": TIP}, {"w": SMOOTH}, {"w": 2 * SMOOTH}]

    assert tolerance.tolerance(runs) == ({"w": 2 * SMOOTH}, True)


@pytest.mark.parametrize("order", ["TTS", "TST", "STT"])
def test_a_width_drawn_twice_is_held_in_whatever_order_it_came(order):
    runs = [{"w": TIP if kind == "T" else SMOOTH} for kind in order]
    smooth_twice = [{"w": SMOOTH if kind == "T" else TIP} for kind in order]

    assert tolerance.tolerance(runs) == ({"w": TIP}, True)
    assert tolerance.tolerance(smooth_twice) == ({"w": SMOOTH}, True)


# ResNet-20's float16 transfer: a one-ulp move of the start crosses the
# transfer's rounding in some of a batch norm's few elements in one run and
# in another's in the next (its momentum one float16 ulp of a gradient,
# 2^-14, or float32 noise): no two of 12 runs agree in every variable.
CROSSED, NOT_CROSSED = 2.0**-14, 1.5e-8


def test_each_variable_settles_on_its_own_two_runs_that_agree():
    runs = [
        {"beta": NOT_CROSSED, "gamma": CROSSED},
        {"beta": CROSSED, "gamma": NOT_CROSSED},
        {"beta": NOT_CROSSED, "gamma": NOT_CROSSED},
    ]

    spread, settled = tolerance.tolerance(runs)

    assert (spread, settled) == (
        {"beta": NOT_CROSSED, "gamma": NOT_CROSSED},
        True,
    )


def _drawn_trainer(aboves):
    """The one device's trainer as a stand-in whose runs tip as drawn.

    The reference lands on its start; the measuring runs, in turn, at
    their start (a smooth spread: its one-ulp move) plus aboves[i] (0.0 or
    TIP: a run that tipped), the last one repeated.
    """
    calls = []

    def train_from(initial):
        calls.append(initial)
        above = aboves[min(len(calls) - 2, len(aboves) - 1)] if calls[1:] else 0
        return {"w": initial["w"] + above}, [0.0]

    @contextlib.contextmanager
    def trainer(graph, devices):
        yield train_from

    return trainer


def _measured(monkeypatch, aboves):
    monkeypatch.setattr(equivalence, "trainer", _drawn_trainer(aboves))
    initial = {"w": np.ones([4], np.float32)}
    return equivalence.measured_reference(CASE, initial, None, None, [])


def test_a_tip_then_smooth_runs_hold_the_towers_to_the_smooth_spread(
    monkeypatch,
):
    reference = _measured(monkeypatch, [TIP, 0.0])
    # The towers 3,000,000 smooth spreads away.
    towers = {"w": reference.values["w"] + 3_000_000 * SMOOTH}

    errors = tolerance.errors(towers, reference.values, reference.spread)

    assert (reference.runs, reference.settled) == (3, True)
    assert reference.extremes["w"] == pytest.approx((SMOOTH, TIP), rel=1e-3)
    assert errors["w"] == pytest.approx(375_000, rel=1e-3)


def test_a_smooth_then_tipping_runs_settle_on_the_tip_and_show_both(
    monkeypatch,
):
    reference = _measured(monkeypatch, [0.0, TIP])

    assert (reference.runs, reference.settled) == (3, True)
    assert reference.spread["w"] == pytest.approx(TIP, rel=1e-3)
    assert reference.extremes["w"] == pytest.approx((SMOOTH, TIP), rel=1e-3)


def test_runs_that_tip_by_turns_settle_on_the_tip_at_the_third(monkeypatch):
    reference = _measured(monkeypatch, [TIP, 0.0] * tolerance.MAX_RUNS)

    # The runs of smooth-tip-tip, which settles there too.
    assert (reference.runs, reference.settled) == (3, True)
    assert reference.spread["w"] == pytest.approx(TIP, rel=1e-3)


def test_runs_16_times_apart_stop_unsettled_after_max_runs(monkeypatch):
    # Each run 16 times as far as the one before: no two agree.
    aboves = [(16**k - 1) * SMOOTH for k in range(tolerance.MAX_RUNS)]

    reference = _measured(monkeypatch, aboves)

    assert (reference.runs, reference.settled) == (tolerance.MAX_RUNS, False)
    assert reference.spread["w"] == pytest.approx(16**7 * SMOOTH, rel=1e-3)


def _result(worst=0.5, settled=True, copy_gap=0.0):
    return equivalence_table.Result(
        CASE,
        worst,
        "model/w",
        copy_gap,
        12.0,
        True,
        tolerance.MAX_RUNS if not settled else 2,
        settled,
        (SMOOTH, TIP),
    )


def test_a_row_shows_the_smallest_spread_beside_the_largest(capsys):
    equivalence_table.print_row(_result(3.5, settled=False))

    assert capsys.readouterr().out.split() == [
        "parameter_server",
        "-",
        "tutorial",
        "float32",
        "2",
        "-",
        "3.500",
        "8",
        "1.2e-07",
        "6.0e-02",
        "0.0e+00",
        "12.0",
        "OUT:",
        "model/w",
        "(UNSETTLED)",
    ]


@pytest.mark.parametrize(
    "worst, settled, copy_gap, verdict",
    [
        (0.5, True, 0.0, "ok"),
        (0.5, False, 0.0, "UNSETTLED (within its widest spread)"),
        (3.5, True, 0.0, "OUT: model/w"),
        (0.5, True, 1e-3, "OUT: a copy differs from its variable"),
    ],
)
def test_a_row_says_ok_only_of_a_settled_cell_within_tolerance(
    capsys, worst, settled, copy_gap, verdict
):
    equivalence_table.print_row(_result(worst, settled, copy_gap))

    # The twelve columns before the verdict, then the verdict whole.
    assert capsys.readouterr().out.strip().split(None, 12)[12] == verdict


@pytest.mark.parametrize(
    "results, allow_unsettled, line, code",
    [
        ([_result()], False, "1 cell(s), 0 out of tolerance, 0 unsettled", 0),
        (
            [_result(), _result(copy_gap=2.0**-20)],
            False,
            "2 cell(s), 1 out of tolerance, 0 unsettled",
            1,
        ),
        (
            [_result(), _result(settled=False)],
            False,
            "2 cell(s), 0 out of tolerance, 1 unsettled",
            1,
        ),
        (
            [_result(settled=False)],
            True,
            "1 cell(s), 0 out of tolerance, 1 unsettled (allowed)",
            0,
        ),
        (
            [_result(settled=False), _result(copy_gap=1.0)],
            True,
            "2 cell(s), 1 out of tolerance, 1 unsettled (allowed)",
            1,
        ),
        # A tolerance that hides: apart, exit 1; out of it: out.
        (
            [_result(), _result()._replace(hidden=("w", 1.0, 1.0))],
            True,
            "2 cell(s), 0 out of tolerance, 0 unsettled, 1 not provable here",
            1,
        ),
        (
            [_result(settled=False), _result(3.5)._replace(hidden=("w", 1, 1))],
            True,
            "2 cell(s), 1 out of tolerance, 1 unsettled (allowed)",
            1,
        ),
    ],
)
def test_the_exit_code_counts_a_copy_gap_as_out_and_an_unsettled_cell_apart(
    capsys, results, allow_unsettled, line, code
):
    assert equivalence_table.print_summary(results, allow_unsettled) == code
    assert capsys.readouterr().out.startswith(line + "; slowest 12.0 s")
