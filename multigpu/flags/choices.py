"""The flags checked together, then turned into plain values, in `main`.

`check_flags` comes first, before a graph or a file, so that a mistake
costs seconds, not the hours of a run that reaches a learning-rate
boundary. Every task of a cluster takes the same command line, so a ps
refuses what its workers would refuse, instead of waiting for workers that
never come.
"""

import os
import sys
from typing import NamedTuple

from multigpu.distributed import cluster, kinds, tf_config
from multigpu.graph import placement, step_optimizer, variable_update
from multigpu.train_dir import restore

LOSS_SCALE_FLAGS = (
    "fp16_loss_scale fp16_enable_auto_loss_scale fp16_inc_loss_scale_every_n"
).split()
FP16_FLAGS = ("force_cpu_bfloat16", *LOSS_SCALE_FLAGS)
_TRAINING_OUTPUT = (
    "clear_train_dir log_frequency log_device_placement save_checkpoint_steps"
    " save_summaries_steps tb_logging profile_steps"
    " pretrained_model_checkpoint_path fine_tune"
).split()
# What --dry_run ignores. Its folders (--train_dir, --data_dir) are taken,
# as a command line that is planned before it is run names them.
DRY_RUN_UNUSED = (
    "max_steps num_epochs eval_only cpu_towers fake_data data_url"
).split() + _TRAINING_OUTPUT
# What MNIST's --eval_only ignores: its training, session and cluster.
EVAL_ONLY_UNUSED = (
    "num_gpus cpu_towers variable_update all_reduce_spec "
    "gradient_pack_bytes gradient_transfer_dtype learning_rate num_epochs "
    "allow_growth gpu_memory_fraction num_intra_threads num_inter_threads "
    "ps_hosts worker_hosts job_name task_index sync_replicas "
    "replicas_to_aggregate operation_timeout_secs"
).split() + _TRAINING_OUTPUT


def check_flags(flag_values, task=cluster.LOCAL_TASK):
    """Raises ValueError on flags that cannot work together or would be
    ignored; task: the `cluster.ClusterTask`, one process's for a script
    without cluster mode."""
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
    for name in FP16_FLAGS:
        _check_needs(flag_values, name, "use_fp16")
    _check_needs(
        flag_values,
        "fp16_inc_loss_scale_every_n",
        "fp16_enable_auto_loss_scale",
    )
    _check_variable_update(flag_values, task)
    for name, why in task.kind.refused_flags.items():
        if _given(flag_values, name):
            raise ValueError(why % _shown(flag_values, name))
    _check_needs(flag_values, "replicas_to_aggregate", "sync_replicas")
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
    if needed not in flag_values:
        return
    if _given(flag_values, name) and not flag_values[needed].value:
        raise ValueError(
            "%s applies only with --%s, which is not set, so it would be "
            "ignored; add --%s or drop --%s"
            % (_shown(flag_values, name), needed, needed, name)
        )


def _refuse_unused(flag_values, mode, unused, what_it_does):
    """Refuses the flags unused that boolean flag mode, when set, would
    ignore."""
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
    """Raises ValueError unless the steps are positive and increasing."""
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


def _check_variable_update(flag_values, task):
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
    kinds.check_mode(mode, task)
    if (
        task.kind.all_reduce_across_workers
        and flag_values.all_reduce_spec
        not in (
            "auto",
            "collective",
        )
    ):
        raise ValueError(
            "%s does not apply in a cluster of workers: every tower of every "
            "worker all-reduces its gradients by TensorFlow's collective "
            "ops; drop --all_reduce_spec"
            % _shown(flag_values, "all_reduce_spec")
        )


# The flags a worker of a cluster may set on its own. Every other flag of a
# trainer changes the numbers and must be the same on every worker.
LOCAL_FLAGS = (
    "train_dir data_dir data_url clear_train_dir log_frequency"
    " log_device_placement save_checkpoint_steps save_summaries_steps"
    " tb_logging trace_step profile_steps pretrained_model_checkpoint_path"
    " fine_tune eval_only dry_run ps_hosts worker_hosts job_name task_index"
    " operation_timeout_secs cpu_towers prefetch_to_device allow_growth"
    " gpu_memory_fraction num_intra_threads num_inter_threads"
).split()


def cluster_task_from_flags(flag_values, environ=os.environ):
    """The `cluster.ClusterTask` of the cluster flags, else of TF_CONFIG
    in environ when it names one (`tf_config.resolve`)."""
    hosts = tf_config.resolve(
        tf_config.ClusterFlags(
            flag_values.ps_hosts,
            flag_values.worker_hosts,
            flag_values.job_name,
            flag_values.task_index,
        ),
        environ.get(tf_config.TF_CONFIG, ""),
    )
    from_env = not (flag_values.ps_hosts or flag_values.worker_hosts)
    task = cluster.task_of(
        hosts,
        flag_values.sync_replicas,
        flag_values.replicas_to_aggregate,
        tf_config.TF_CONFIG if from_env else None,
    )
    if task.kind.serves and from_env:
        task = task._replace(hosts_from=tf_config.TF_CONFIG)
    return task


def _named_by_flags(value_type, flag_values):
    return value_type(*(flag_values[name].value for name in value_type._fields))


def session_options_from_flags(flag_values):
    return _named_by_flags(placement.SessionOptions, flag_values)


def dtypes(flag_values, devices, sync_replicas=False):
    """(compute_dtype, loss_scaling): the towers' tf.DType on devices
    (strs) and, for float16, its `step_optimizer.LossScaling`, else None.
    bfloat16 and float32 are not scaled: a loss-scale flag is refused."""
    compute_dtype = placement.compute_dtype(
        flag_values.use_fp16, devices, flag_values.force_cpu_bfloat16
    )
    given = [name for name in LOSS_SCALE_FLAGS if _given(flag_values, name)]
    if compute_dtype.name != "float16" and given:
        raise ValueError(
            "%s applies only to float16 on GPUs, and this run computes in %s "
            "on the CPU (which needs no loss scaling), so it would be "
            "ignored; drop --%s"
            % (_shown(flag_values, given[0]), compute_dtype.name, given[0])
        )
    return compute_dtype, step_optimizer.loss_scaling(
        compute_dtype,
        flag_values.fp16_loss_scale,
        flag_values.fp16_enable_auto_loss_scale,
        flag_values.fp16_inc_loss_scale_every_n,
        sync_replicas,
    )


def cluster_settings(flag_values):
    """{name: value} of every flag the trainer defines (not absl's or
    TensorFlow's own) but `LOCAL_FLAGS`."""
    return {
        flag.name: flag.value
        for module, module_flags in flag_values.flags_by_module_dict().items()
        if not module.startswith(("absl", "tensorflow"))
        for flag in module_flags
        if flag.name not in LOCAL_FLAGS
    }


class Recipe(NamedTuple):
    """--model and its recipe, `registry.model`'s arguments in order."""

    model: str
    learning_rate: float  # 0: the model's own recipe
    learning_rate_boundaries: list  # of str, the flag's digits
    momentum: float


def recipe_from_flags(flag_values):
    return _named_by_flags(Recipe, flag_values)


class UpdateChoice(NamedTuple):
    """--variable_update and its options, for `variable_update`."""

    mode: str
    variable_device: str  # 'cpu' (the TF1 design) for a trainer without it
    all_reduce_spec: str
    pack_bytes: int  # --gradient_pack_bytes
    transfer_dtype: str  # --gradient_transfer_dtype


def update_choice_from_flags(flag_values):
    return UpdateChoice(
        flag_values.variable_update,
        (
            flag_values.variable_device
            if "variable_device" in flag_values
            else "cpu"
        ),
        flag_values.all_reduce_spec,
        flag_values.gradient_pack_bytes,
        flag_values.gradient_transfer_dtype,
    )


class TowerOptions(NamedTuple):
    """How each tower computes: the device flags and --clip_gradients."""

    clip_norm: float  # --clip_gradients, 0 for no clipping
    xla: bool
    prefetch: bool


class Schedule(NamedTuple):
    """When a trainer logs, saves and stops (`training.run_training`)."""

    log_frequency: int
    max_steps: int  # None: the input's end
    save_checkpoint_steps: int
    save_summaries_steps: int  # None: no summaries (MNIST's --tb_logging)
    # Given on the command line: a short run that lowers it says so.
    log_frequency_given: bool = False


def schedule_from_flags(flag_values):
    summaries = "tb_logging" not in flag_values or flag_values.tb_logging
    return Schedule(
        flag_values.log_frequency,
        flag_values.max_steps if "max_steps" in flag_values else None,
        flag_values.save_checkpoint_steps,
        flag_values.save_summaries_steps if summaries else None,
        flag_values["log_frequency"].present,
    )


class Start(NamedTuple):
    """How a trainer starts in its train_dir (`training.run_training`)."""

    clear_train_dir: bool
    pretrained: restore.Pretrained


def start_from_flags(flag_values):
    return Start(
        flag_values.clear_train_dir,
        restore.Pretrained(
            flag_values.pretrained_model_checkpoint_path,
            flag_values.fine_tune,
        ),
    )


class TowerPlan(NamedTuple):
    """How the towers compute and share their variables."""

    devices: list  # strs, one tower's device each
    update: object  # the `variable_update.VariableUpdate`
    compute_dtype: object  # tf.DType the layers compute in
    config: object  # the session's `ConfigProto`
    loss_scaling: object  # float16's `step_optimizer.LossScaling`, or None
    options: TowerOptions


def tower_plan(flag_values, devices, task):
    """The `TowerPlan` of the flags for devices (strs) and the task."""
    update = update_of_choice(
        devices, task, update_choice_from_flags(flag_values)
    )
    compute_dtype, loss_scaling = dtypes(flag_values, devices, task.kind.sync)
    config = placement.session_config(
        devices,
        log_device_placement=flag_values.log_device_placement,
        operation_timeout_secs=flag_values.operation_timeout_secs,
        options=session_options_from_flags(flag_values),
        fuse_ops=cluster.may_fuse_ops(task, compute_dtype),
    )
    options = TowerOptions(
        flag_values.clip_gradients,
        flag_values.xla,
        flag_values.prefetch_to_device,
    )
    return TowerPlan(
        devices, update, compute_dtype, config, loss_scaling, options
    )


def describe_plan(plan):
    """The lines a trainer prints of its `TowerPlan`."""
    lines = [placement.describe_devices(plan.devices)]
    if plan.update.all_reduce is not None:
        lines.append(
            "--variable_update=replicated: a copy of the variables on each "
            "tower, their gradients all-reduced by %s" % plan.update.all_reduce
        )
    return "\n".join(lines)


def update_of_choice(devices, task, choice):
    """The towers' `variable_update.VariableUpdate` of an `UpdateChoice`."""
    return variable_update.variable_update(
        choice.mode,
        devices,
        variable_device_choice=choice.variable_device,
        all_reduce_spec=choice.all_reduce_spec,
        places_variables=task.kind.places_variables,
        workers=variable_update.Workers(
            task, choice.pack_bytes, choice.transfer_dtype
        )
        if task.kind.all_reduce_across_workers
        else None,
    )
