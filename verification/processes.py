"""The suite's scripts started as a user starts them, on free ports.

What the accident runner, the equivalence runner's workers, the tests and
the benchmarks share.
"""

import os
import pathlib
import socket
import subprocess
import sys

# The folder of the suite's scripts: the checkout, or where pip installed
# them (beside this package).
REPO = pathlib.Path(__file__).resolve().parent.parent
# Quiet TensorFlow's C++ logging; see each line of Python output at once.
SCRIPT_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def free_ports(count):
    """count distinct ports of 127.0.0.1 that no process listens on now."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_script(script, *args, log_path, prefix=(), env=None):
    """Starts a script in the background, its output going to log_path.

    The caller must end it (`kill`, then `wait`), e.g. in a finally block.
    prefix: the command that runs it, e.g. ('ip', 'netns', 'exec', NAME),
    which execs the script in the same process. env: dict of environment
    variables to set beside SCRIPT_ENV's.

    Returns:
      The `subprocess.Popen`.
    """
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [*prefix, sys.executable, str(REPO / script), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(SCRIPT_ENV, **(env or {})),
            cwd=REPO,
        )
