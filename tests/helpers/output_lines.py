"""The lines a user sees: a script run as theirs, and TensorFlow's lines."""

import functools
import re
import subprocess
import sys

from helpers.scripts import REPO, user_env


def run_as_user(script, *args):
    """Runs a script with the environment of `user_env`."""
    return subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=user_env(),
        cwd=REPO,
    )


# Lines of TensorFlow's rather than ours: C++ log lines ('E0000 00:00:...',
# 'W1124 ...'), its Python logger's, absl's start-up notice, the second line
# of the CPU-instructions notice, deprecation notices.
TENSORFLOW_LINE = re.compile(
    r"^([EFIW]\d{4} \d\d:\d\d:\d\d|(INFO|WARNING|ERROR):tensorflow|"
    r"WARNING: All log messages before absl|To enable the following)"
    r"|deprecat",
    re.IGNORECASE,
)


def tensorflow_lines(result):
    return [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if TENSORFLOW_LINE.search(line)
    ]


@functools.lru_cache(maxsize=None)
def script_help(script):
    """A script's --help as `run_as_user` runs it, once a test session.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text; callers
      only read it.
    """
    return run_as_user(script, "--help")


def help_words(script):
    """A script's --help, each run of spaces and line breaks made one space.

    absl wraps a flag's help at its own width; a phrase is found whole.
    """
    result = script_help(script)
    assert result.returncode == 0, result.stderr[-3000:]
    return " ".join(result.stdout.split())
