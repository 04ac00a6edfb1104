"""Shared test helpers: running the scripts, and the sample data sets."""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def run_script(script, *args, timeout=600, expect_success=True):
    """Runs one of the suite's scripts in a subprocess, as a user would.

    Scripts define absl flags, so each runs in its own process.

    Args:
      script: file name in the repository, e.g. 'cifar10_train.py'.
      *args: its command-line flags.
      timeout: seconds before the test fails instead of hanging.
      expect_success: assert the exit code is 0 (True) or non-zero (False).

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )
    output = "%s\n--- stderr ---\n%s" % (result.stdout, result.stderr[-5000:])
    if expect_success:
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0, output
    return result


@pytest.fixture(scope="session")
def cifar10_data_dir(tmp_path_factory):
    """A --data_dir holding the built-in CIFAR-10 sample set."""
    import cifar10_input

    data_dir = tmp_path_factory.mktemp("cifar10_data")
    cifar10_input.write_fake_data(str(data_dir))
    return data_dir
