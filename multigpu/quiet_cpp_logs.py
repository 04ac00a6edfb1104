"""Hides TensorFlow's known harmless C++ notices; import it before TensorFlow.

TensorFlow's C++ libraries log notices as they load (oneDNN is on, no CUDA
driver, which CPU instructions were compiled in), before TF_CPP_MIN_LOG_LEVEL
is read, so the variable alone cannot hide them. Every script imports this
module first: unless the user set TF_CPP_MIN_LOG_LEVEL or asked for absl's
--verbosity, it sets the variable to 1 (no INFO) and passes the C++ side of
stderr through a filter. The filter drops the INFO lines, the two error
lines every run on a machine without a GPU prints although nothing failed
(cuInit finds no driver; oneDNN's uint8 ops fall back to Eigen), and the
warnings that repeat a failure the script reports in one line; it keeps
every other warning and error, and cuInit's on a machine with NVIDIA's
driver. Python's own stderr (tracebacks, our one-line errors) is written
directly, never through the filter.

The filter is a small process of its own (`cpp_log_filter`), not a thread
of the script, so that the script's exit code, or its death by a signal, is
its own. At a normal exit the script waits for it after Python's exit
handlers, so no process is left behind; what the C++ side writes later,
as the interpreter ends, goes to the terminal as it is, so no line is lost.

A Ctrl-C while TensorFlow loads (the first seconds) ends the script with
one line and exit code 130, not a traceback from inside `import
tensorflow`; `flags.script.run_script` hands Ctrl-C back to Python's own
handler once the script's main starts.
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
    """Whether the command line asks for absl's --verbosity (or -v).

    Then TensorFlow's own lines are shown as TensorFlow prints them.
    """
    return any(
        arg.startswith("-") and arg.lstrip("-").split("=")[0] in _VERBOSITY
        for arg in argv[1:]
    )


# absl's flag of the log level, and its short name.
_VERBOSITY = ("verbosity", "v")


def _install():
    """Filters the C++ side of stderr, unless the user asked otherwise.

    Returns:
      A function that puts stderr back and waits for the filter to pass on
      the last lines and end; None if stderr is left as it is.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or wants_tensorflow_logs(sys.argv):
        return None
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
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


_as_script = _started_as_script()
if _as_script:
    # Held from before the filter starts until the handler is set: a Ctrl-C
    # at any moment from the filter's start on is the handler's one line
    # (a loaded machine can take longer than the test's 0.1 s in between).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
_drain = _install()
if _as_script:
    signal.signal(signal.SIGINT, functools.partial(_exit_on_ctrl_c, _drain))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
