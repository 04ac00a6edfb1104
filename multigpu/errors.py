"""The suite's errors, and one line per error instead of a traceback."""

import os
import sys

from absl import app


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss diverged)."""


def run_script(main):
    """Runs an absl main; bad input or a failed run exits 1 with one line.

    A `ValueError` (bad flag, file or data) or a `TrainingError` prints
    'SCRIPT: error: MESSAGE' on stderr instead of a traceback.
    """

    def main_with_errors(argv):
        try:
            return main(argv)
        except (ValueError, TrainingError) as e:
            sys.exit("%s: error: %s" % (os.path.basename(sys.argv[0]), e))

    app.run(main_with_errors)
