"""Hides TensorFlow's C++ INFO start-up notices; import it before TensorFlow.

TensorFlow's C++ libraries log notices as they load (oneDNN is on, no CUDA
driver, which CPU instructions were compiled in), before TF_CPP_MIN_LOG_LEVEL
is read, so the variable alone cannot hide them. Every script imports this
module first: unless the user set TF_CPP_MIN_LOG_LEVEL, it sets it to 1 (no
INFO) and passes the C++ side of stderr through a filter that drops the
INFO lines, and the warnings that repeat a failure the script reports in
one line, and keeps the other warnings and errors. Python's own stderr
(tracebacks, our one-line errors) is written directly, never through the
filter.

A Ctrl-C while TensorFlow loads (the first seconds) ends the script with
one line and exit code 130, not a traceback from inside `import
tensorflow`; `errors.run_script` hands Ctrl-C back to Python's own handler
once the script's main starts.
"""

import atexit
import os
import re
import signal
import sys
import threading

# The C++ lines the filter drops: INFO lines ('I1123 18:03:47.603 ...' or
# 'I0000 00:00:...'), the notice of logs written before absl::InitializeLog
# and the second line of the CPU-instructions notice; and the warnings that
# echo a failed step, which the script reports itself in one line (a NaN
# histogram aborts the step's rendezvous, then cancels the input).
_DROPPED_LINE = re.compile(
    rb"^(I\d{4} \d\d:\d\d:\d\d"
    rb"|WARNING: All log messages before absl::InitializeLog"
    rb"|To enable the following instructions:"
    rb"|W\d{4} [^]]*\] Local rendezvous is aborting"
    rb"|W\d{4} [^]]*\] OP_REQUIRES failed at \S+ : CANCELLED"
    rb"|\t \[\[\{\{node )"
)
# Seconds the filter may take at exit to pass on the last C++ lines.
_DRAIN_SECS = 2


def _pass_on(read_fd, write_fd):
    with os.fdopen(read_fd, "rb") as pipe, os.fdopen(write_fd, "wb") as out:
        for line in pipe:
            if not _DROPPED_LINE.match(line):
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


def _exit_on_ctrl_c(signum, frame):
    os.write(
        sys.stderr.fileno(),
        b"%s: interrupted (SIGINT) while starting; nothing was written\n"
        % os.path.basename(sys.argv[0]).encode(),
    )
    # 128 + SIGINT, the shell's status of a Ctrl-C.
    os._exit(128 + signal.SIGINT)


# The scripts that import this module first (as files or as the installed
# commands, e.g. cifar10-train); a test or a benchmark that imports one
# keeps Python's own Ctrl-C.
SCRIPTS = (
    "cifar10_train",
    "cifar10_multi_gpu_train",
    "cifar10_eval",
    "mnist_multi_gpu_train",
)


def _started_as_script():
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    return name.replace("-", "_") in SCRIPTS


_install()
if _started_as_script():
    signal.signal(signal.SIGINT, _exit_on_ctrl_c)
