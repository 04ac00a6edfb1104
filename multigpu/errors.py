"""The suite's errors: a failed run, a run a signal stopped."""


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
