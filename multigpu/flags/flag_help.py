"""A script's `--help`: its description, then its flags grouped by purpose.

absl's own `--help` lists a script's flags in one alphabetical list under
the path of the file that ran (an installed command's wrapper in a virtual
environment); ours prints the script's docstring and its flags in the
groups below, whether the script runs as a file or as an installed command.
absl's `--helpfull` still lists every flag, absl's own included.
"""

import importlib.metadata
import os
import re
import sys
import textwrap

# The groups of --help, in this order, and the flags each holds (of any of
# the scripts; a script lists the ones it takes).
GROUPS = (
    (
        "Data and batches",
        ("data_dir", "fake_data", "data_url", "eval_data", "batch_size"),
    ),
    ("Model", ("model",)),
    (
        "Training",
        (
            "max_steps",
            "num_epochs",
            "learning_rate",
            "learning_rate_boundaries",
            "momentum",
            "clip_gradients",
            "pretrained_model_checkpoint_path",
            "fine_tune",
        ),
    ),
    (
        "Evaluation",
        (
            "checkpoint_dir",
            "eval_dir",
            "num_examples",
            "run_once",
            "eval_interval_secs",
            "last_step",
            "eval_only",
        ),
    ),
    (
        "GPUs and devices",
        (
            "num_gpus",
            "cpu_towers",
            "variable_update",
            "all_reduce_spec",
            "variable_device",
            "xla",
            "prefetch_to_device",
            "dry_run",
            "allow_growth",
            "gpu_memory_fraction",
            "num_intra_threads",
            "num_inter_threads",
            "log_device_placement",
        ),
    ),
    (
        "Reduced precision",
        (
            "use_fp16",
            "force_cpu_bfloat16",
            "fp16_loss_scale",
            "fp16_enable_auto_loss_scale",
            "fp16_inc_loss_scale_every_n",
        ),
    ),
    (
        "Cluster",
        (
            "ps_hosts",
            "worker_hosts",
            "job_name",
            "task_index",
            "sync_replicas",
            "replicas_to_aggregate",
            "gradient_pack_bytes",
            "gradient_transfer_dtype",
            "operation_timeout_secs",
        ),
    ),
    (
        "Output",
        (
            "train_dir",
            "clear_train_dir",
            "log_frequency",
            "save_checkpoint_steps",
            "save_summaries_steps",
            "tb_logging",
            "trace_step",
            "profile_steps",
        ),
    ),
)
# The installed package, whose commands (cifar10-train, ...) run the scripts.
DISTRIBUTION = "tf1-multi-gpu"
# A script's command line in a docstring or a report: 'python NAME.py', and
# its flags up to an aligned comment, if any.
_SCRIPT_COMMAND = re.compile(r"\bpython (\w+)\.py\b([^\n#]*? {2,}#)?")
# The group of a flag no group names (a test keeps it empty).
OTHER = "Other"
# The closing line: where absl's own flags are.
ABSL_FLAGS = (
    "absl's own flags (--verbosity=0 shows TensorFlow's log lines): --helpfull."
)


def help_text(description, script_flags):
    """The text of a script's --help.

    Args:
      description: str, the script's docstring.
      script_flags: absl `Flag`s, the flags the script takes.

    Returns:
      str, the description, the groups that hold any of script_flags (each
      flag with its default and its help), and the line on absl's flags.
    """
    by_name = {flag.name: flag for flag in script_flags}
    grouped = [
        (title, [name for name in names if name in by_name])
        for title, names in GROUPS
    ]
    named = {name for _, names in GROUPS for name in names}
    grouped.append((OTHER, sorted(set(by_name) - named)))
    lines = [description.strip(), ""]
    for title, names in grouped:
        if names:
            lines.append("%s:" % title)
            for name in names:
                lines += _describe(by_name[name])
            lines.append("")
    return "\n".join(lines + [ABSL_FLAGS])


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


def as_invoked(text):
    """text, its 'python NAME.py' commands named as the user ran this one.

    Under an installed command (cifar10-train) every script the package
    installs is named by its command (python cifar10_eval.py becomes
    cifar10-eval); run as a file, text is returned as it is.
    """
    commands = _installed_commands()
    if os.path.basename(sys.argv[0]) not in commands.values():
        return text

    def renamed(found):
        command = commands.get(found.group(1))
        if command is None:
            return found.group(0)
        if found.group(2) is None:
            return command
        # The comment stays in its column.
        flags = found.group(2)[:-1].rstrip()
        return (command + flags).ljust(len(found.group(0)) - 1) + "#"

    return _SCRIPT_COMMAND.sub(renamed, text)


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
