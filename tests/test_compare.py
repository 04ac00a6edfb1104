"""The speed check's arithmetic: ratios of rounds, their range, verdicts."""

import subprocess
import sys

import pytest
from conftest import REPO

from benchmarks import compare


def _samples(base, tree):
    """compare.measure's shape: one benchmark, one variant, per round."""
    return {
        "hooks": {
            "base": [{"run_training": rate} for rate in base],
            "tree": [{"run_training": rate} for rate in tree],
        }
    }


def test_a_row_is_the_median_ratio_of_its_rounds_with_their_range():
    [row] = compare.compare(_samples([700, 800, 1000], [1050, 800, 1000]), 0.03)
    assert row["ratio"] == pytest.approx(1.0)
    assert (row["low"], row["high"]) == (pytest.approx(1.0), 1.5)
    assert (row["base"], row["tree"]) == (800, 1000)
    assert row["verdict"] == "same"


def test_a_median_below_the_threshold_is_slower_and_above_it_faster():
    [slower] = compare.compare(_samples([1000, 1000], [960, 960]), 0.03)
    [faster] = compare.compare(_samples([1000, 1000], [1040, 1040]), 0.03)
    [within] = compare.compare(_samples([1000, 1000], [975, 975]), 0.03)
    assert [slower["verdict"], faster["verdict"], within["verdict"]] == [
        "SLOWER",
        "faster",
        "same",
    ]


def test_the_table_says_which_benchmark_has_no_rates_on_this_machine():
    rows = compare.compare(_samples([1000], [1000]), 0.03)
    lines = compare.table(rows, ["hooks", "fp16"]).splitlines()
    assert lines[2] == (
        "| hooks | run_training | 1000 | 1000 | 1.000 (1.000-1.000) | same |"
    )
    assert lines[3] == "| fp16 | no rates on this machine | | | | |"


def test_an_unknown_benchmark_is_one_line_and_exit_1():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare", "--only=hooks,peers"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "compare: error: --only names peers; known: train, hooks, towers, "
        "fp16\n"
    )
