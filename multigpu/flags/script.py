"""How a script runs: its flags parsed, one line per error, no traceback,
every log line once."""

import logging
import os
import signal
import sys

import tensorflow as tf
from absl import app, flags

from multigpu import errors
from multigpu.flags import flag_help


def run_script(main):
    """Runs an absl main; bad input or a failed run exits 1 with one line.

    A `ValueError` (bad flag, file or data) or a `TrainingError` prints
    'SCRIPT: error: MESSAGE' on stderr instead of a traceback. An
    `Interrupted` run prints 'SCRIPT: MESSAGE' and exits with its code; a
    Ctrl-C outside the training loop exits 130 with one line.

    Args:
      main: callable(argv), the script's main, defined in the script's
        module (whose flags `--help` lists).
    """
    _list_flags_in_help(main.__module__)

    def parse_flags(argv):
        if any(arg in _GROUPED_HELP_FLAGS for arg in argv[1:]):
            print(_script_help(main.__module__))
            sys.exit(0)
        return _parse_flags(argv)

    def main_with_errors(argv):
        # Python's own Ctrl-C from here on (see quiet_cpp_logs).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # TensorFlow's logger prints each line itself ('INFO:tensorflow:
        # ...'); passed on to absl's handler it would be printed again.
        tf.get_logger().propagate = False
        # TensorFlow's INFO lines ('Graph was finalized.', 'Saving
        # checkpoints for ...') are replaced by our own line per event;
        # absl's --verbosity brings them back.
        if not flags.FLAGS["verbosity"].present:
            tf.get_logger().setLevel(logging.WARNING)
        script = os.path.basename(sys.argv[0])
        try:
            return main(argv)
        except (ValueError, errors.TrainingError) as e:
            sys.exit("%s: error: %s" % (script, e))
        except errors.Interrupted as e:
            print("%s: %s" % (script, e), file=sys.stderr, flush=True)
            sys.exit(e.exit_code)
        except (KeyboardInterrupt, RuntimeError) as e:
            # pybind11 turns a Ctrl-C that lands while TensorFlow's C++
            # raises into RuntimeError('... REPLACED BY KeyboardInterrupt').
            if not isinstance(e, KeyboardInterrupt) and (
                _PYBIND_CTRL_C not in str(e)
            ):
                raise
            print(
                "%s: interrupted (SIGINT) outside the training loop; "
                "nothing more to save" % script,
                file=sys.stderr,
                flush=True,
            )
            sys.exit(errors.CTRL_C_EXIT_CODE)

    app.run(main_with_errors, flags_parser=parse_flags)


# What pybind11 says of a Ctrl-C that replaced a C++ exception.
_PYBIND_CTRL_C = "REPLACED BY KeyboardInterrupt"
# The help flags that print the script's grouped help (`flag_help`).
_GROUPED_HELP_FLAGS = ("-?", "-h", "--help", "--helpshort")
# absl's help flags: each prints the help, then exits with code 1.
_HELP_FLAGS = ("-?", "-h", "--help", "--helpshort", "--helpfull", "--helpxml")


def _parse_flags(argv):
    """absl's flag parsing: a bad flag is one line, asked-for help exit 0.

    absl itself prints a bad flag in two lines of its own ('FATAL Flags
    parsing error: ...', 'Pass --helpshort ...') and ends --help with exit
    code 1.
    """
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        # absl words a float's bound '0.5 is not number >= 1.0'.
        message = str(e).replace(" is not number ", " is not a number ")
        sys.exit("%s: error: %s" % (os.path.basename(argv[0]), message))
    except SystemExit as e:
        if e.code == 1 and any(arg in _HELP_FLAGS for arg in argv[1:]):
            sys.exit(0)
        raise


def _script_help(module_name):
    """The grouped --help of the script whose main is in module_name.

    The same text whether the script runs as a file (its module is
    '__main__', its flags registered under sys.argv[0]) or as an installed
    command, which imports it as a module.
    """
    registered = sys.argv[0] if module_name == "__main__" else module_name
    return flag_help.as_invoked(
        flag_help.help_text(
            sys.modules[module_name].__doc__ or "",
            flags.FLAGS.get_key_flags_for_module(registered),
        )
    )


def _list_flags_in_help(module_name):
    """Makes `--help` of an installed command list the script's flags.

    absl's `--help` lists the key flags of the module named sys.argv[0]:
    the script itself under `python cifar10_train.py`, but the generated
    wrapper under an installed command (`cifar10-train`), which imports
    the script as a module.
    """
    if module_name == "__main__":
        return
    for flag in flags.FLAGS.get_key_flags_for_module(module_name):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
