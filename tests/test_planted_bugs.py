"""The planted-bug script: its bugs still plant, its checks exist, it runs.

verification/planted_bugs.py plants each bug of its list in a scratch copy
and runs the quick checks that should catch it; here, that every bug's
text is still in its file (once) and every check names a test of the quick
loop, and one cheap bug run through the script.
"""

import re
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPT_ENV

from verification import planted_bugs


@pytest.mark.parametrize("bug", planted_bugs.BUGS, ids=lambda bug: bug.name)
def test_every_planted_bug_replaces_a_text_found_once_in_its_file(bug):
    text = (REPO / bug.path).read_text()

    assert (text.count(bug.old), bug.new != bug.old) == (1, True)


@pytest.mark.parametrize("bug", planted_bugs.BUGS, ids=lambda bug: bug.name)
def test_every_check_of_a_bug_names_a_quick_test_of_its_file(bug):
    for check in bug.checks:
        path, name = re.fullmatch(r"([^:]+)::(\w+)(\[.*\])?", check).group(1, 2)
        source = (REPO / path).read_text()
        definition = source.index("\ndef %s(" % name)
        # Not marked slow: the line before its definition is no mark.
        assert not source[:definition].endswith("@pytest.mark.slow"), check


@pytest.mark.slow
def test_the_script_names_the_check_that_caught_a_bug_and_writes_nothing():
    planted = REPO / "verification" / "equivalence_tolerance.py"
    before = planted.read_bytes()

    run = subprocess.run(
        [sys.executable, "-m", "verification.planted_bugs"]
        + ["--bugs=no_ulp_floor"],
        capture_output=True,
        text=True,
        timeout=300,
        env=SCRIPT_ENV,
        cwd=REPO,
    )

    check = (
        "test_a_spread_is_the_largest_gap_at_least_a_float32_ulp_and_0_for_"
        "an_int"
    )
    assert (run.returncode, run.stderr) == (0, ""), run.stdout + run.stderr
    # How: pytest's line of the failed assert, its dicts shortened.
    how = (
        "AssertionError: assert {'moved': 0.5... 'count': 0.0} == "
        "{'moved': 0.5... 'count': 0.0}"
    )
    row, summary = run.stdout.splitlines()[2:]
    # The check's time unplanted, in seconds.
    secs = row.split(" | ")[5]
    assert re.fullmatch(r"\d+\.\d\d", secs), row
    assert (row, summary) == (
        "| no_ulp_floor | verification/equivalence_tolerance.py | "
        "a spread of 0 where the measuring run repeats a value exactly "
        "| %s | %s | %s | %s | "
        "caught |" % (check, check, secs, how),
        "1 of 1 planted bug(s) caught",
    )
    assert planted.read_bytes() == before
