"""How a script runs: its flags parsed, one line per error, no traceback,
every log line once; its `--help`, its flags grouped by purpose.

absl's own `--help` lists a script's flags in one alphabetical list under
the path of the file that ran (an installed command's wrapper); ours prints
the script's docstring and its flags in the groups below. absl's
`--helpfull` still lists every flag.

For the argparse era of the TF1 tutorials (Sept. 2017 to Jan. 2018), when
`cifar10.py` held an `argparse.ArgumentParser` that parsed at import, before
a script could add its arguments (tensorflow/models#2481):
`RememberingParser` parses when the script does and keeps what it parsed.
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

    An `Interrupted` run exits with its code; a Ctrl-C outside the training
    loop exits 130 with one line. main: the script's, defined in the module
    whose flags `--help` lists.
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
        # Our own lines replace TensorFlow's INFO lines ('Graph was
        # finalized.'); absl's --verbosity brings them back.
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

    try:
        app.run(main_with_errors, flags_parser=parse_flags)
    except BrokenPipeError:
        _end_at_closed_stdout()


def _end_at_closed_stdout():
    """Ends quietly, as a command-line tool whose reader left (`| head`):
    the exit code of a SIGPIPE, no traceback."""
    # Python would flush the lines it still holds at exit, and fail again.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


_PYBIND_CTRL_C = "REPLACED BY KeyboardInterrupt"
_GROUPED_HELP_FLAGS = ("-?", "-h", "--help", "--helpshort")
# absl's help flags: each prints the help, then exits with code 1.
_HELP_FLAGS = ("-?", "-h", "--help", "--helpshort", "--helpfull", "--helpxml")


def _parse_flags(argv):
    """absl's flag parsing, but a bad flag is one line (absl's are two),
    and asked-for help exits 0 (absl's 1)."""
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
    """Makes `--help` of an installed command list the script's flags:
    absl lists the key flags of the module named sys.argv[0], the command's
    generated wrapper, which imports the script as a module."""
    if module_name == "__main__":
        return
    for flag in flags.FLAGS.get_key_flags_for_module(module_name):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


# The groups of --help, in this order (a script lists the flags it takes).
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
ABSL_FLAGS = (
    "absl's own flags (--verbosity=0 shows TensorFlow's log lines): --helpfull."
)
DISTRIBUTION = "tf1-multi-gpu"
# A script's command line in a docstring or a report: 'python NAME.py', and
# its flags up to an aligned comment, if any.
_SCRIPT_COMMAND = re.compile(r"\bpython (\w+)\.py\b([^\n#]*? {2,}#)?")


def _script_help(module_name):
    """The grouped --help of the script whose main is in module_name, the
    same whether it runs as a file ('__main__', its flags registered under
    sys.argv[0]) or as an installed command."""
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
    this one: under an installed command, python cifar10_eval.py becomes
    cifar10-eval."""
    try:
        entry_points = importlib.metadata.distribution(
            DISTRIBUTION
        ).entry_points
    except importlib.metadata.PackageNotFoundError:
        entry_points = []
    commands = {
        entry.value.split(":")[0]: entry.name
        for entry in entry_points
        if entry.group == "console_scripts"
    }
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


class RememberingParser(argparse.ArgumentParser):
    """An `ArgumentParser` that keeps the values it parsed last (None
    before); a bad argument is one line and exit 1, not the usage and 2."""

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
    """An argparse type: absl's spellings of a boolean, any case, as
    `tf.app.run()` parses the same command line again with absl (the era's
    `type=bool` made 'False' True)."""
    if text.lower() in ("true", "t", "1"):
        return True
    if text.lower() in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError("%r is not true or false" % text)
