"""How a script runs: its flags parsed, one line per error, no traceback,
every log line once; its `--help`, its flags grouped by purpose.

absl's own `--help` lists a script's flags in one alphabetical list under
the path of the file that ran (an installed command's wrapper in a virtual
environment); ours prints the script's docstring and its flags in the
groups below, whether the script runs as a file or as an installed command.
absl's `--helpfull` still lists every flag, absl's own included.

The argparse era of the TF1 tutorials (Sept. 2017 to Jan. 2018): then
`cifar10.py` held an `argparse.ArgumentParser`; a script did `parser =
cifar10.parser`, added its own arguments, `FLAGS = parser.parse_args()` in
`__main__`, then `tf.app.run()`, whose absl parse of the same command line
tolerates the flags absl does not know. The original module also parsed at
import, before a script could add its arguments, so every flag a script
added was unrecognized (tensorflow/models#2481). `RememberingParser` parses
when the script does and keeps what it parsed for the module's calls.
"""

import argparse
import importlib.metadata
import logging
import os
import re
import signal
import sys
import textwrap

import tensorflow as tf
from absl import app, flags

from multigpu import errors


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
# The help flags that print the script's grouped help (`_script_help`).
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


# The groups of --help, in this order, and the flags each holds (of any of
# the scripts; a script lists the ones it takes).
GROUPS = (
    ("Data and batches", "data_dir fake_data data_url eval_data batch_size"),
    ("Model", "model"),
    (
        "Training",
        "max_steps num_epochs learning_rate learning_rate_boundaries momentum"
        " clip_gradients pretrained_model_checkpoint_path fine_tune",
    ),
    (
        "Evaluation",
        "checkpoint_dir eval_dir num_examples run_once eval_interval_secs"
        " last_step eval_only",
    ),
    (
        "GPUs and devices",
        "num_gpus cpu_towers variable_update all_reduce_spec variable_device"
        " xla prefetch_to_device dry_run allow_growth gpu_memory_fraction"
        " num_intra_threads num_inter_threads log_device_placement",
    ),
    (
        "Reduced precision",
        "use_fp16 force_cpu_bfloat16 fp16_loss_scale"
        " fp16_enable_auto_loss_scale fp16_inc_loss_scale_every_n",
    ),
    (
        "Cluster",
        "ps_hosts worker_hosts job_name task_index sync_replicas"
        " replicas_to_aggregate gradient_pack_bytes gradient_transfer_dtype"
        " operation_timeout_secs",
    ),
    (
        "Output",
        "train_dir clear_train_dir log_frequency save_checkpoint_steps"
        " save_summaries_steps tb_logging trace_step profile_steps",
    ),
)
# The group of a flag no group names (a test keeps it empty).
OTHER = "Other"
# The closing line: where absl's own flags are.
ABSL_FLAGS = (
    "absl's own flags (--verbosity=0 shows TensorFlow's log lines): --helpfull."
)
# The installed package, whose commands (cifar10-train, ...) run the scripts.
DISTRIBUTION = "tf1-multi-gpu"
# A script's command line in a docstring or a report: 'python NAME.py', and
# its flags up to an aligned comment, if any.
_SCRIPT_COMMAND = re.compile(r"\bpython (\w+)\.py\b([^\n#]*? {2,}#)?")


def _script_help(module_name):
    """The grouped --help of the script whose main is in module_name: its
    docstring, the groups that hold any of its flags (each flag with its
    default and its help), and the line on absl's flags.

    The same text whether the script runs as a file (its module is
    '__main__', its flags registered under sys.argv[0]) or as an installed
    command, which imports it as a module.
    """
    registered = sys.argv[0] if module_name == "__main__" else module_name
    by_name = {
        flag.name: flag
        for flag in flags.FLAGS.get_key_flags_for_module(registered)
    }
    grouped = [(title, names.split()) for title, names in GROUPS]
    named = {name for _, names in grouped for name in names}
    grouped.append((OTHER, sorted(set(by_name) - named)))
    lines = [(sys.modules[module_name].__doc__ or "").strip(), ""]
    for title, names in grouped:
        names = [name for name in names if name in by_name]
        if names:
            lines.append("%s:" % title)
            for name in names:
                lines += _describe(by_name[name])
            lines.append("")
    return "\n".join(as_invoked(lines + [ABSL_FLAGS]))


def _describe(flag):
    """'  --name (default: D; a positive integer)' and the wrapped help."""
    facts = ["default: %s" % _default(flag)]
    if flag.parser.syntactic_help and not flag.boolean:
        facts.append(flag.parser.syntactic_help)
    head = "  --%s%s (%s)" % (
        "[no]" if flag.boolean else "",
        flag.name,
        "; ".join(facts),
    )
    return [head] + textwrap.wrap(
        flag.help, width=80, initial_indent=" " * 6, subsequent_indent=" " * 6
    )


def _default(flag):
    """A flag's default as a user types it: 'on', '128', 'none'."""
    if flag.boolean:
        return "on" if flag.default else "off"
    if isinstance(flag.default, (list, tuple)):
        return ",".join(map(str, flag.default)) or "none"
    if flag.default is None or flag.default == "":
        return "none"
    return str(flag.default)


def as_invoked(texts):
    """texts (strs), their 'python NAME.py' commands named as the user ran
    this one: under an installed command (cifar10-train) every script the
    package installs is named by its command (python cifar10_eval.py becomes
    cifar10-eval); run as a file, texts are returned as they are.
    """
    commands = _installed_commands()
    if os.path.basename(sys.argv[0]) not in commands.values():
        return list(texts)

    def renamed(found):
        command = commands.get(found.group(1))
        if command is None:
            return found.group(0)
        if found.group(2) is None:
            return command
        # The comment stays in its column.
        flags = found.group(2)[:-1].rstrip()
        return (command + flags).ljust(len(found.group(0)) - 1) + "#"

    return [_SCRIPT_COMMAND.sub(renamed, text) for text in texts]


def _installed_commands():
    """{module: command} of the package's installed commands, if any."""
    try:
        entry_points = importlib.metadata.distribution(
            DISTRIBUTION
        ).entry_points
    except importlib.metadata.PackageNotFoundError:
        return {}
    return {
        entry.value.split(":")[0]: entry.name
        for entry in entry_points
        if entry.group == "console_scripts"
    }


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
