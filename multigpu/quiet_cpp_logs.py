"""Hides TensorFlow's known harmless C++ notices; import it before TensorFlow.

TensorFlow's C++ libraries log notices as they load, before
TF_CPP_MIN_LOG_LEVEL is read, so the variable alone cannot hide them
(at 2 or 3 as well). Unless the user set TF_CPP_MIN_LOG_LEVEL=0 or asked
for absl's --verbosity, this passes the C++ side of stderr through a
filter (`cpp_log_filter`), and sets the level to 1 (no INFO) if the user
set none; Python's own stderr is written directly.

The filter is a process of its own, not a thread, so that the script's
exit code, or its death by a signal, is its own. At a normal exit the
script waits for it after Python's exit handlers; what the C++ side writes
later goes to the terminal as it is, so no line is lost.

A Ctrl-C while TensorFlow loads ends the script with one line and exit
code 130, not a traceback from inside `import tensorflow`;
`flags.script.run_script` hands Ctrl-C back to Python once main starts.
"""

import atexit
import functools
import os
import signal
import subprocess
import sys

from multigpu import cpp_log_filter

# Seconds the filter may take at exit to pass on the last C++ lines.
_DRAIN_SECS = 2


def wants_tensorflow_logs(argv):
    """Whether the command line asks for absl's --verbosity (or -v)."""
    return any(
        arg.startswith("-") and arg.lstrip("-").split("=")[0] in _VERBOSITY
        for arg in argv[1:]
    )


_VERBOSITY = ("verbosity", "v")


def _install():
    """Filters the C++ side of stderr, unless the user asked otherwise;
    returns the function that puts it back and waits for the filter, or
    None."""
    if wants_tensorflow_logs(sys.argv):
        return None
    if os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1") == "0":
        return None
    sys.stderr.flush()
    terminal = os.dup(2)
    sys.stderr = open(  # noqa: SIM115 - lives as long as the process
        os.dup(terminal), "w", buffering=1, errors="backslashreplace"
    )
    read_fd, write_fd = os.pipe()
    # A session of its own: a Ctrl-C at the terminal does not reach the
    # filter, which outlives the script to pass on its last lines. -I -S:
    # the standard library only, started in milliseconds.
    line_filter = subprocess.Popen(
        [sys.executable, "-I", "-S", cpp_log_filter.__file__],
        stdin=read_fd,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(read_fd)
    os.dup2(write_fd, 2)
    os.close(write_fd)

    def drain():
        # Closes the pipe's one end in this process: the filter reads to its
        # end, then exits. Past the bound, a child of the script holds the
        # pipe, and the filter ends with that child.
        os.dup2(terminal, 2)
        try:
            line_filter.wait(_DRAIN_SECS)
        except subprocess.TimeoutExpired:
            pass

    atexit.register(drain)
    return drain


def _exit_on_ctrl_c(drain, signum, frame):
    if drain is not None:
        drain()
    os.write(
        sys.stderr.fileno(),
        b"%s: interrupted (SIGINT) while starting; nothing was written\n"
        % os.path.basename(sys.argv[0]).encode(),
    )
    # 128 + SIGINT, the shell's status of a Ctrl-C.
    os._exit(128 + signal.SIGINT)


# The scripts that import this module first; a test that imports one keeps
# Python's own Ctrl-C.
SCRIPTS = (
    "cifar10_train",
    "cifar10_multi_gpu_train",
    "cifar10_eval",
    "mnist_multi_gpu_train",
)


_as_script = (
    os.path.splitext(os.path.basename(sys.argv[0]))[0].replace("-", "_")
    in SCRIPTS
)
if _as_script:
    # Held from before the filter starts until the handler is set: a Ctrl-C
    # at any moment from the filter's start on is the handler's one line
    # (a loaded machine can take longer than the test's 0.1 s in between).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
_drain = _install()
if _as_script:
    signal.signal(signal.SIGINT, functools.partial(_exit_on_ctrl_c, _drain))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
