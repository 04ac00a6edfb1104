"""The argparse era of the TF1 tutorials (Sept. 2017 to Jan. 2018).

Then `cifar10.py` held an `argparse.ArgumentParser`; a script did `parser =
cifar10.parser`, added its own arguments, `FLAGS = parser.parse_args()` in
`__main__`, then `tf.app.run()`, whose absl parse of the same command line
tolerates the flags absl does not know. The original module also parsed at
import, before a script could add its arguments, so every flag a script
added was unrecognized (tensorflow/models#2481). `RememberingParser` parses
when the script does and keeps what it parsed for the module's calls.
"""

import argparse
import sys


class RememberingParser(argparse.ArgumentParser):
    """An `ArgumentParser` that keeps the values it parsed last.

    `values` is None until a script parses; then the `argparse.Namespace`
    that `parse_args` (or `parse_known_args`) returned. A bad argument is
    one line on stderr and exit 1, naming it, instead of the usage and
    exit 2.
    """

    values = None

    def parse_known_args(self, args=None, namespace=None):
        values, rest = super().parse_known_args(args, namespace)
        self.values = values
        return values, rest

    def error(self, message):
        sys.exit("%s: error: %s" % (self.prog, message))


def positive_int(text):
    """An argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("%d is not >= 1" % value)
    return value


def boolean(text):
    """An argparse type: absl's spellings of a boolean, any case.

    The same as absl's, so that `tf.app.run()`, which parses the command
    line with absl after the script's `parse_args()`, accepts what this
    accepted (the era's `type=bool` made 'False' True).
    """
    if text.lower() in ("true", "t", "1"):
        return True
    if text.lower() in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError("%r is not true or false" % text)
