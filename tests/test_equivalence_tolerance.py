"""The equivalence runner's tolerance: spreads, errors, the runs to settle."""

import numpy as np
import pytest

from benchmarks import equivalence, equivalence_table
from benchmarks import equivalence_tolerance as tolerance

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


def test_a_first_measuring_run_gives_its_spreads_and_does_not_fit():
    reference = {"w": np.array([1.0, 2.0], np.float32)}
    measuring = {"w": np.array([1.0, 2.5], np.float32)}

    spread, fitted = tolerance.widened(reference, measuring)

    assert (spread, fitted) == ({"w": 0.5}, False)


def test_a_measuring_run_within_the_tolerance_of_those_before_fits():
    reference = {"w": np.array([1.0, 2.0], np.float32)}
    # 8 x 0.5 = 4 is the tolerance; a gap of 2 is within it.
    measuring = {"w": np.array([3.0, 2.0], np.float32)}

    spread, fitted = tolerance.widened(reference, measuring, {"w": 0.5})

    assert (spread, fitted) == ({"w": 2.0}, True)


def test_a_measuring_run_outside_the_tolerance_widens_it_and_does_not_fit():
    reference = {"w": np.array([0.5, 2.0], np.float32), "count": np.array(3)}
    # One ulp of 2.0 (2^-22) times 8 is the tolerance; 0.25 is outside.
    measuring = {"w": np.array([0.25, 2.0], np.float32), "count": np.array(3)}

    spread, fitted = tolerance.widened(
        reference, measuring, {"w": 2.0**-22, "count": 0.0}
    )

    assert (spread, fitted) == ({"w": 0.25, "count": 0.0}, False)


def _tipping_train(graph, initial, devices):
    """The one device's training as a stand-in that tips like a ReLU.

    Its result is its start, plus 0.1 where the start's first value moved
    up: seed 1 moves it down, seeds 2 and 3 up (`moved_by_one_ulp`).
    """
    w = initial["w"]
    return {"w": w + (0.1 if w[0] > 1.0 else 0.0)}, [0.0]


def test_a_cell_that_tips_takes_measuring_runs_until_one_fits(monkeypatch):
    monkeypatch.setattr(equivalence, "train", _tipping_train)
    initial = {"w": np.ones([4], np.float32)}

    reference = equivalence.measured_reference(CASE, initial, None, None, [])

    # Seed 1 does not tip (spread: one ulp), seed 2 tips far outside 8 of
    # them and widens the spread to 0.1, seed 3 tips within 8 x 0.1.
    assert (reference.runs, reference.settled) == (3, True)
    assert reference.spread["w"] == pytest.approx(0.1, rel=1e-5)


def test_a_tolerance_that_never_fits_stops_unsettled_after_max_runs(
    monkeypatch,
):
    runs = []

    def diverging_train(graph, initial, devices):
        # Each measuring run lands 10 times farther than the one before.
        runs.append(initial)
        return {"w": np.float32(1e-6 * 10.0 ** len(runs))}, [0.0]

    monkeypatch.setattr(equivalence, "train", diverging_train)
    initial = {"w": np.float32(1.0)}

    reference = equivalence.measured_reference(CASE, initial, None, None, [])

    assert (reference.runs, reference.settled) == (tolerance.MAX_RUNS, False)
    assert len(runs) == 1 + tolerance.MAX_RUNS


def test_a_row_out_of_an_unsettled_tolerance_says_so(capsys):
    result = equivalence_table.Result(
        CASE, 3.5, "model/w", 0.0, 12.0, True, tolerance.MAX_RUNS, False
    )

    equivalence_table.print_row(result)

    assert capsys.readouterr().out.split() == [
        "parameter_server",
        "-",
        "tutorial",
        "float32",
        "2",
        "3.500",
        "8",
        "0.0e+00",
        "12.0",
        "OUT:",
        "model/w",
        "(its",
        "tolerance",
        "unsettled)",
    ]


@pytest.mark.parametrize(
    "worst, settled, verdict",
    [
        (0.5, True, "ok"),
        (0.5, False, "ok (its tolerance unsettled)"),
        (3.5, True, "OUT: model/w"),
    ],
)
def test_a_row_says_whether_its_tolerance_settled_only_where_not(
    capsys, worst, settled, verdict
):
    result = equivalence_table.Result(
        CASE, worst, "model/w", 0.0, 12.0, True, tolerance.MAX_RUNS, settled
    )

    equivalence_table.print_row(result)

    # The nine columns before the verdict, then the verdict whole.
    assert capsys.readouterr().out.strip().split(None, 9)[9] == verdict
