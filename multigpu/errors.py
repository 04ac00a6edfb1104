"""The suite's errors: a failed run, a run a signal stopped."""

import contextlib
import signal

# The signals a run takes as a request to stop (`multigpu.run.interrupts`).
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# A shell's exit status of a process ended by signal N.
SHELL_SIGNAL_BASE = 128


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss diverged)."""


class Interrupted(Exception):
    """A signal stopped the run, after saving it; exit_code: the shell's
    status of the signal (130 for SIGINT)."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


# 128 + SIGINT.
CTRL_C_EXIT_CODE = 130


class Signalled(BaseException):
    """One of SIGNALS, raised in a process with nothing to save
    (`raising`)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = SHELL_SIGNAL_BASE + signum


# The signals `raising`'s handler took in its block, in order.
_taken = []


def _raise_signalled(signum, frame):
    _taken.append(signum)
    if not _inside_session_run(frame):
        raise Signalled(signum)


def _inside_session_run(frame):
    """Whether frame runs inside a session run, called back from its C++
    (to convert the run's results): an exception raised there is printed
    and dropped, and the block went on (a ps task ran on after one SIGTERM
    in 6)."""
    while frame is not None:
        if frame.f_code.co_name == "_call_tf_sessionrun":
            return True
        frame = frame.f_back
    return False


def raise_if_signalled():
    """Raises the `Signalled` of a signal `raising`'s handler took but
    could not raise (inside a session run). Call it after each run of a
    loop of the block."""
    if _taken:
        raise Signalled(_taken[0])


@contextlib.contextmanager
def raising():
    """In the block, each of SIGNALS raises `Signalled` where Python is (a
    Ctrl-C too, for KeyboardInterrupt), or, inside a session run, at the
    next `raise_if_signalled`; the previous handlers on exit."""
    _taken.clear()
    previous = {
        signum: signal.signal(signum, _raise_signalled) for signum in SIGNALS
    }
    try:
        yield
    except KeyboardInterrupt:
        raise Signalled(signal.SIGINT) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _taken.clear()
