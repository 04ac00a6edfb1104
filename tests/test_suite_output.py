"""The README's test command prints pytest's lines, and only those.

`python -m pytest -q` runs the tests in three processes (`-n 3`, pyproject's
addopts); the controller that starts them imports conftest.py, and with it
TensorFlow, whose C++ start-up notices it would print after the summary.
"""

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

# pytest-xdist's lines, the progress line and the summary of one file's run.
EXPECTED = (
    r"bringing up nodes\.\.\.",
    r"bringing up nodes\.\.\.",
    r"",
    r"\.+ +\[100%\]",
    r"\d+ passed in [0-9.]+s",
)


@pytest.mark.slow
def test_the_test_command_prints_pytests_lines_and_no_tensorflow_notice():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["tests/test_layout.py"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )
    lines = (result.stdout + result.stderr).rstrip("\n").split("\n")
    assert result.returncode == 0, lines
    assert len(lines) == len(EXPECTED), lines
    for line, pattern in zip(lines, EXPECTED):
        assert re.fullmatch(pattern, line), lines
