"""The equivalence runner's tolerance: measured spreads, errors in them."""

import numpy as np

from benchmarks import equivalence_tolerance as tolerance


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


def test_a_spread_is_the_largest_gap_and_at_least_a_float32_ulp():
    reference = {
        "moved": np.array([1.0, -2.0], np.float32),
        "same": np.array([1.0, -2.0], np.float32),
        "count": np.array(3, np.int64),
    }
    measuring = {
        "moved": np.array([1.0, -2.5], np.float32),
        "same": np.array([1.0, -2.0], np.float32),
        "count": np.array(3, np.int64),
    }

    spread = tolerance.spreads(reference, measuring)

    # One float32 ulp of 2.0 is 2^-22; an integer has no rounding.
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
