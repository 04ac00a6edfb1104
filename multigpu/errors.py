"""The suite's errors, and one line per error instead of a traceback."""

import os
import sys

from absl import app


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss diverged)."""


class Interrupted(Exception):
    """A signal stopped the run, after saving it.

    Attributes:
      exit_code: int, the shell's status of the signal (130 for SIGINT).
    """

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


# The shell's exit status of a Ctrl-C (SIGINT, 2): 128 + 2.
CTRL_C_EXIT_CODE = 130


def run_script(main):
    """Runs an absl main; bad input or a failed run exits 1 with one line.

    A `ValueError` (bad flag, file or data) or a `TrainingError` prints
    'SCRIPT: error: MESSAGE' on stderr instead of a traceback. An
    `Interrupted` run prints 'SCRIPT: MESSAGE' and exits with its code; a
    Ctrl-C outside the training loop exits 130 with one line.
    """

    def main_with_errors(argv):
        script = os.path.basename(sys.argv[0])
        try:
            return main(argv)
        except (ValueError, TrainingError) as e:
            sys.exit("%s: error: %s" % (script, e))
        except Interrupted as e:
            print("%s: %s" % (script, e), file=sys.stderr, flush=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            print(
                "%s: interrupted (SIGINT) outside the training loop; "
                "nothing more to save" % script,
                file=sys.stderr,
                flush=True,
            )
            sys.exit(CTRL_C_EXIT_CODE)

    app.run(main_with_errors)
