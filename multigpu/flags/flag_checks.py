"""Flags that cannot work together, or that the run would ignore: one line.

Every script's `main` calls `check_flags` first, before it builds a graph
or writes a file, so that a mistake costs seconds, not the hours of a run
that reaches a learning-rate boundary. A script's flags are checked when it
defines them; a cluster's flags once its task is known (its cluster may
come from TF_CONFIG). Every task of a cluster takes the same command line,
so a ps refuses what its workers would refuse, instead of waiting for
workers that never come.
"""

import sys

from multigpu.distributed import cluster, kinds

# The flags of float16's loss scaling, which do nothing in other dtypes.
LOSS_SCALE_FLAGS = (
    "fp16_loss_scale",
    "fp16_enable_auto_loss_scale",
    "fp16_inc_loss_scale_every_n",
)
# The flags of reduced precision, which do nothing without --use_fp16.
FP16_FLAGS = ("force_cpu_bfloat16", *LOSS_SCALE_FLAGS)
# The flags of what a run writes and prints as it trains.
_TRAINING_OUTPUT = (
    "clear_train_dir log_frequency log_device_placement save_checkpoint_steps"
    " save_summaries_steps tb_logging profile_steps"
    " pretrained_model_checkpoint_path fine_tune"
).split()
# The flags of a run that trains, which --dry_run (it builds the graph and
# prints its plan, with no session, data or files) would ignore. Its
# folders (--train_dir, --data_dir) are taken, as a command line that is
# planned before it is run names them.
DRY_RUN_UNUSED = (
    "max_steps num_epochs eval_only cpu_towers fake_data data_url"
).split() + _TRAINING_OUTPUT
# The flags of MNIST's training, its session and its cluster, which
# --eval_only (it scores the newest checkpoint of --train_dir on the test
# set, in a session of its own) would ignore.
EVAL_ONLY_UNUSED = (
    "num_gpus cpu_towers variable_update all_reduce_spec "
    "gradient_pack_bytes gradient_transfer_dtype learning_rate num_epochs "
    "allow_growth gpu_memory_fraction num_intra_threads num_inter_threads "
    "ps_hosts "
    "worker_hosts job_name task_index sync_replicas replicas_to_aggregate "
    "operation_timeout_secs"
).split() + _TRAINING_OUTPUT


def check_flags(flag_values, task=None):
    """Refuses flags that cannot work together or would be ignored.

    Args:
      flag_values: the script's parsed flags, its `FLAGS`.
      task: the `cluster.ClusterTask` of a multi-tower trainer (from its
        flags or TF_CONFIG), None for a script without cluster mode.

    Raises:
      ValueError: one line naming the flags, what they need and what to do.
    """
    _refuse_unused(
        flag_values,
        "dry_run",
        DRY_RUN_UNUSED,
        "builds the graph and prints its plan, with no session, no data and "
        "no file written",
    )
    _refuse_unused(
        flag_values,
        "eval_only",
        EVAL_ONLY_UNUSED,
        "scores the newest checkpoint of --train_dir on the test set, "
        "training nothing",
    )
    if _given(flag_values, "data_url") and flag_values.fake_data:
        raise ValueError(
            "%s is where the data set is downloaded from, and --fake_data "
            "writes the built-in sample set instead, so it would be ignored; "
            "drop --data_url (or --fake_data)" % _shown(flag_values, "data_url")
        )
    _check_recipe(flag_values)
    _check_reduced_precision(flag_values)
    _check_variable_update(flag_values, task)
    _check_cluster(flag_values, task or cluster.LOCAL_TASK)
    _check_needs(flag_values, "fine_tune", "pretrained_model_checkpoint_path")
    _check_needs(flag_values, "save_summaries_steps", "tb_logging")
    if _given(flag_values, "last_step") and flag_values.run_once:
        raise ValueError(
            "--last_step=%d ends a watch for new checkpoints, and --run_once "
            "scores one checkpoint and exits; drop one of them"
            % flag_values.last_step
        )
    if _given(flag_values, "eval_interval_secs") and flag_values.run_once:
        print(
            "WARNING: --eval_interval_secs=%d is ignored: --run_once scores "
            "the newest checkpoint once" % flag_values.eval_interval_secs,
            file=sys.stderr,
        )


def _given(flag_values, name):
    """Whether the script defines flag name and the command line sets it."""
    return name in flag_values and flag_values[name].present


def _shown(flag_values, name):
    """'--name=VALUE' as the command line gave it."""
    value = flag_values[name].value
    if isinstance(value, list):
        value = ",".join(value)
    elif isinstance(value, bool):
        return "--%s" % name if value else "--no%s" % name
    return "--%s=%s" % (name, value)


def _check_needs(flag_values, name, needed):
    """Refuses flag name, when given, unless flag needed is set too."""
    if needed not in flag_values:
        return
    if _given(flag_values, name) and not flag_values[needed].value:
        raise ValueError(
            "%s applies only with --%s, which is not set, so it would be "
            "ignored; add --%s or drop --%s"
            % (_shown(flag_values, name), needed, needed, name)
        )


def _refuse_unused(flag_values, mode, unused, what_it_does):
    """Refuses a flag that boolean flag mode, when set, would ignore.

    Args:
      flag_values: the script's parsed flags.
      mode: str, a boolean flag: 'dry_run' or 'eval_only'.
      unused: strs, the flags that mode does not use.
      what_it_does: str, what mode does instead, for the error.
    """
    if not (_given(flag_values, mode) and flag_values[mode].value):
        return
    for name in unused:
        if name != mode and _given(flag_values, name):
            raise ValueError(
                "%s does not apply with --%s, which %s, so it would be "
                "ignored; drop --%s (or --%s)"
                % (_shown(flag_values, name), mode, what_it_does, name, mode)
            )


def _check_recipe(flag_values):
    """--momentum and --learning_rate_boundaries need --learning_rate."""
    if "learning_rate_boundaries" not in flag_values:
        return  # The MNIST trainer: --learning_rate alone.
    for name in ("momentum", "learning_rate_boundaries"):
        if _given(flag_values, name) and flag_values.learning_rate <= 0:
            raise ValueError(
                "%s applies only with --learning_rate, which replaces the "
                "--model's own recipe; without it the model trains with its "
                "own recipe and --%s would be ignored: add --learning_rate="
                "RATE (per 128 examples per step) or drop --%s"
                % (_shown(flag_values, name), name, name)
            )
    check_boundaries(
        [int(step) for step in flag_values.learning_rate_boundaries]
    )


def check_boundaries(boundaries):
    """Raises ValueError unless the steps are positive and increasing.

    Args:
      boundaries: list of int, --learning_rate_boundaries.
    """
    shown = "--learning_rate_boundaries=%s" % ",".join(map(str, boundaries))
    if 0 in boundaries:
        raise ValueError(
            "%s: step 0 is no boundary, the rate starts at --learning_rate; "
            "expected steps from 1 on" % shown
        )
    for before, after in zip(boundaries, boundaries[1:]):
        if after == before:
            raise ValueError(
                "%s lists step %d twice; list each step once (each divides "
                "the learning rate by 10)" % (shown, after)
            )
        if after < before:
            raise ValueError(
                "%s: expected steps in increasing order, found %d after %d; "
                "e.g. --learning_rate_boundaries=%s"
                % (
                    shown,
                    after,
                    before,
                    ",".join(map(str, sorted(set(boundaries)))),
                )
            )


def _check_reduced_precision(flag_values):
    """The --fp16_* flags and --force_cpu_bfloat16 need --use_fp16."""
    for name in FP16_FLAGS:
        _check_needs(flag_values, name, "use_fp16")
    _check_needs(
        flag_values,
        "fp16_inc_loss_scale_every_n",
        "fp16_enable_auto_loss_scale",
    )


def _check_variable_update(flag_values, task):
    """Each --variable_update takes its own flags, and its own cluster."""
    if "variable_update" not in flag_values:
        return
    mode = flag_values.variable_update
    own_flag = {
        "parameter_server": "variable_device",
        "replicated": "all_reduce_spec",
    }
    other = "replicated" if mode == "parameter_server" else "parameter_server"
    if _given(flag_values, own_flag[other]):
        raise ValueError(
            "%s applies only to --variable_update=%s, and this run is %s, so "
            "it would be ignored; drop it or pass --variable_update=%s"
            % (_shown(flag_values, own_flag[other]), other, mode, other)
        )
    if task is not None:
        kinds.check_mode(mode, task)
    kind = (task or cluster.LOCAL_TASK).kind
    if kind.all_reduce_across_workers and flag_values.all_reduce_spec not in (
        "auto",
        "collective",
    ):
        raise ValueError(
            "%s does not apply in a cluster of workers: every tower of every "
            "worker all-reduces its gradients by TensorFlow's collective "
            "ops; drop --all_reduce_spec"
            % _shown(flag_values, "all_reduce_spec")
        )


def given_flags(flag_values, names):
    """((name, '--name=VALUE'), ...) of the flags names the command line
    sets, in the order of names."""
    return tuple(
        (name, _shown(flag_values, name))
        for name in names
        if _given(flag_values, name)
    )


def refuse_loss_scale(given, compute_dtype):
    """Refuses the loss-scale flags of a run that computes not in float16.

    Args:
      given: `given_flags` of LOSS_SCALE_FLAGS.
      compute_dtype: tf.DType, the towers' compute dtype: bfloat16 (a CPU)
        or float32 (a CPU without bfloat16 instructions) are not scaled.

    Raises:
      ValueError: one of the flags is given (named).
    """
    if compute_dtype.name == "float16" or not given:
        return
    name, shown = given[0]
    raise ValueError(
        "%s applies only to float16 on GPUs, and this run computes in %s on "
        "the CPU (which needs no loss scaling), so it would be ignored; drop "
        "--%s" % (shown, compute_dtype.name, name)
    )


def _check_cluster(flag_values, task):
    """The flags the task's kind of run refuses, and those of sync mode."""
    for name, why in task.kind.refused_flags.items():
        if _given(flag_values, name):
            raise ValueError(why % _shown(flag_values, name))
    _check_needs(flag_values, "replicas_to_aggregate", "sync_replicas")
