"""The flags turned into plain values, once, in a script's `main`.

Each function here takes the parsed flags, the script's `FLAGS`, and
returns the plain value of one concern, which `main` passes down: the code
below the scripts never sees a flags object. `cifar10_multi_gpu_train.main`
makes its `TowerPlan` once, the flags' choices made against its devices; the
MNIST trainer takes the variable update alone (`update_of_choice`).
"""

import collections
import os
from typing import NamedTuple

from multigpu.distributed import cluster, tf_config
from multigpu.flags import flag_checks
from multigpu.graph import loss_scale, placement, variable_update


def cluster_task_from_flags(flag_values, environ=os.environ):
    """The `cluster.cluster_task` of the cluster flags.

    Without cluster flags, the cluster and the task's role come from the
    TF_CONFIG environment variable when it names one (`tf_config.resolve`).

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`, passed by its
        `main`.
      environ: the environment to read TF_CONFIG from.

    Returns:
      A `ClusterTask`, as `cluster_task` returns it.

    Raises:
      ValueError: bad flags, a bad TF_CONFIG, or both naming a cluster and
        disagreeing.
    """
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
    task = cluster.cluster_task(
        *hosts,
        flag_values.sync_replicas,
        flag_values.replicas_to_aggregate,
        hosts_from=tf_config.TF_CONFIG if from_env else None,
    )
    if task.kind.serves and from_env:
        task = task._replace(hosts_from=tf_config.TF_CONFIG)
    return task


def session_options_from_flags(flag_values):
    """The `placement.SessionOptions` of `define_session_flags`' flags.

    Args:
      flag_values: the parsed flags, the script's `FLAGS`, passed by `main`.
    """
    return placement.SessionOptions(
        flag_values.allow_growth,
        flag_values.gpu_memory_fraction,
        flag_values.num_intra_threads,
        flag_values.num_inter_threads,
    )


class Precision(NamedTuple):
    """--use_fp16 and its flags: the layers' dtype, float16's loss scaling."""

    use_fp16: bool
    force_cpu_bfloat16: bool
    loss_scale: float  # --fp16_loss_scale, the (starting) scale
    auto_loss_scale: bool  # --fp16_enable_auto_loss_scale
    inc_loss_scale_every_n: int  # --fp16_inc_loss_scale_every_n
    # ((name, '--name=VALUE'), ...) of the loss-scale flags given, refused
    # where the run computes not in float16.
    loss_scale_given: tuple


def precision_from_flags(flag_values):
    """The `Precision` of `common_flags.define_fp16_flags`' flags."""
    return Precision(
        flag_values.use_fp16,
        flag_values.force_cpu_bfloat16,
        flag_values.fp16_loss_scale,
        flag_values.fp16_enable_auto_loss_scale,
        flag_values.fp16_inc_loss_scale_every_n,
        flag_checks.given_flags(flag_values, flag_checks.LOSS_SCALE_FLAGS),
    )


def dtypes(precision, devices, sync_replicas=False):
    """(compute_dtype, loss_scaling): the towers' dtype on devices
    (`placement.compute_dtype`) and, for float16, its
    `loss_scale.LossScaling`, else None.

    Args:
      precision: the `Precision` of the flags.
      devices: strs, one tower's device each.
      sync_replicas: bool, the cluster's --sync_replicas.

    Raises:
      ValueError: a loss-scale flag given for a run that computes not in
        float16 (`flag_checks.refuse_loss_scale`).
    """
    compute_dtype = placement.compute_dtype(
        precision.use_fp16, devices, precision.force_cpu_bfloat16
    )
    flag_checks.refuse_loss_scale(precision.loss_scale_given, compute_dtype)
    return compute_dtype, loss_scale.loss_scaling(
        compute_dtype,
        precision.loss_scale,
        precision.auto_loss_scale,
        precision.inc_loss_scale_every_n,
        sync_replicas,
    )


# The flags a worker of a cluster may set on its own: its folders, its
# output, its session's resources, where it is in the cluster, and what only
# the chief acts on. Every other flag of a trainer changes the numbers and
# must be the same on every worker (`agreement`, docs/cluster.md).
LOCAL_FLAGS = (
    "train_dir data_dir data_url clear_train_dir log_frequency"
    " log_device_placement save_checkpoint_steps save_summaries_steps"
    " tb_logging trace_step profile_steps pretrained_model_checkpoint_path"
    " fine_tune eval_only dry_run ps_hosts worker_hosts job_name task_index"
    " operation_timeout_secs cpu_towers prefetch_to_device allow_growth"
    " gpu_memory_fraction num_intra_threads num_inter_threads"
).split()


def cluster_settings(flag_values):
    """The settings every worker of a cluster must share: dict name -> value.

    Every flag the trainer defines (not absl's or TensorFlow's own) but
    `LOCAL_FLAGS`, with its value.

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`, passed by its
        `main`.
    """
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
    """The `Recipe` of `common_flags.define_recipe_flags`' flags."""
    return Recipe(
        flag_values.model,
        flag_values.learning_rate,
        flag_values.learning_rate_boundaries,
        flag_values.momentum,
    )


class UpdateChoice(NamedTuple):
    """--variable_update and its options, for `variable_update`."""

    mode: str
    # --variable_device; 'cpu' (the TF1 design) for a trainer without it.
    variable_device: str
    all_reduce_spec: str
    pack_bytes: int  # --gradient_pack_bytes
    transfer_dtype: str  # --gradient_transfer_dtype


def update_choice_from_flags(flag_values):
    """The `UpdateChoice` of `tower_flags`' variable-update flags."""
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
    """How each tower computes: `tower_flags.define_device_flags`' flags
    and --clip_gradients."""

    clip_norm: float  # --clip_gradients, 0 for no clipping
    xla: bool
    prefetch: bool  # --prefetch_to_device


def tower_options_from_flags(flag_values):
    """The `TowerOptions` of the flags."""
    return TowerOptions(
        flag_values.clip_gradients,
        flag_values.xla,
        flag_values.prefetch_to_device,
    )


class Schedule(NamedTuple):
    """When a trainer logs, saves and stops (`training.run_training`)."""

    log_frequency: int  # steps between progress lines
    max_steps: int  # the global step to stop at; None: the input's end
    save_checkpoint_steps: int
    save_summaries_steps: int  # None: no summaries (MNIST's --tb_logging)


def schedule_from_flags(flag_values):
    """The `Schedule` of the flags of `common_flags.define_trainer_flags`.

    A trainer without --max_steps (MNIST) trains until its input ends;
    one with --tb_logging writes summaries only with it.
    """
    summaries = "tb_logging" not in flag_values or flag_values.tb_logging
    return Schedule(
        flag_values.log_frequency,
        flag_values.max_steps if "max_steps" in flag_values else None,
        flag_values.save_checkpoint_steps,
        flag_values.save_summaries_steps if summaries else None,
    )


class Start(NamedTuple):
    """How a trainer starts in its train_dir (`training.run_training`)."""

    clear_train_dir: bool
    # (--pretrained_model_checkpoint_path, --fine_tune), for a train_dir
    # without checkpoints.
    pretrained: tuple


def start_from_flags(flag_values):
    """The `Start` of --clear_train_dir and the warm-start flags."""
    return Start(
        flag_values.clear_train_dir,
        (
            flag_values.pretrained_model_checkpoint_path,
            flag_values.fine_tune,
        ),
    )


# How the towers compute and share their variables, as the flags choose.
#   devices: strs, one tower's device each.
#   update: the `variable_update.VariableUpdate` of --variable_update.
#   compute_dtype: tf.DType the layers compute in (--use_fp16).
#   config: the session's `ConfigProto`.
#   loss_scaling: the float16 loss scaling (`loss_scale`), or None.
#   options: the `TowerOptions` (--clip_gradients, --xla, ...).
TowerPlan = collections.namedtuple(
    "TowerPlan", "devices update compute_dtype config loss_scaling options"
)


def tower_plan(devices, task, update, precision, session, options):
    """The `TowerPlan` of the flags; prints the devices and the all-reduce.

    Args:
      devices: strs, one tower's device each.
      task: the `cluster.ClusterTask`.
      update: the `UpdateChoice` of the flags.
      precision: the `Precision` of the flags.
      session: (log_device_placement, operation_timeout_secs, options), the
        session's flags for `placement.session_config`.
      options: the `TowerOptions` of the flags.
    """
    update = update_of_choice(devices, task, update)
    compute_dtype, loss_scaling = dtypes(
        precision, devices, task.sync_replicas
    )
    config = placement.session_config(
        devices,
        *session,
        fuse_ops=cluster.may_fuse_ops(task, compute_dtype),
    )
    print(placement.describe_devices(devices))
    if update.all_reduce is not None:
        print(
            "--variable_update=replicated: a copy of the variables on each "
            "tower, their gradients all-reduced by %s" % update.all_reduce
        )
    return TowerPlan(
        devices, update, compute_dtype, config, loss_scaling, options
    )


def update_of_choice(devices, task, choice):
    """The towers' `variable_update.VariableUpdate` of a
    `choices.UpdateChoice` (--variable_update and its options)."""
    return variable_update.variable_update(
        choice.mode,
        devices,
        variable_device_choice=choice.variable_device,
        all_reduce_spec=choice.all_reduce_spec,
        task=task,
        pack_bytes=choice.pack_bytes,
        transfer_dtype=choice.transfer_dtype,
    )
