"""Hides TensorFlow's C++ INFO start-up notices; import it before TensorFlow.

TensorFlow's C++ libraries log notices as they load (oneDNN is on, no CUDA
driver, which CPU instructions were compiled in), before TF_CPP_MIN_LOG_LEVEL
is read, so the variable alone cannot hide them. Every script imports this
module first: unless the user set TF_CPP_MIN_LOG_LEVEL, it sets it to 1 (no
INFO) and passes the C++ side of stderr through a filter that drops the
INFO lines and keeps warnings and errors. Python's own stderr (tracebacks,
our one-line errors) is written directly, never through the filter.
"""

import atexit
import os
import re
import sys
import threading

# A C++ INFO line ('I1123 18:03:47.603 ...' or 'I0000 00:00:...'), the
# notice of logs written before absl::InitializeLog, and the second line of
# the CPU-instructions notice.
_INFO_LINE = re.compile(
    rb"^(I\d{4} \d\d:\d\d:\d\d|WARNING: All log messages before "
    rb"absl::InitializeLog|To enable the following instructions:)"
)
# Seconds the filter may take at exit to pass on the last C++ lines.
_DRAIN_SECS = 2


def _pass_on(read_fd, write_fd):
    with os.fdopen(read_fd, "rb") as pipe, os.fdopen(write_fd, "wb") as out:
        for line in pipe:
            if not _INFO_LINE.match(line):
                out.write(line)
                out.flush()


def _install():
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    sys.stderr.flush()
    terminal = os.dup(2)
    sys.stderr = open(  # noqa: SIM115 - lives as long as the process
        os.dup(terminal), "w", buffering=1, errors="backslashreplace"
    )
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    thread = threading.Thread(
        target=_pass_on, args=(read_fd, terminal), daemon=True
    )
    thread.start()

    def drain():
        os.close(2)
        thread.join(_DRAIN_SECS)

    atexit.register(drain)


_install()
