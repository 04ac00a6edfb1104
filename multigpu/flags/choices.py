"""The flags turned into plain values, once, in a script's `main`.

Each function here takes the parsed flags, the script's `FLAGS`, and
returns the plain value of one concern, which `main` passes down: the code
below the scripts never sees a flags object.
"""

import os

from multigpu.distributed import cluster, tf_config
from multigpu.flags import flag_checks, tower_flags
from multigpu.graph import loss_scale, placement


def cluster_task_from_flags(flag_values, environ=os.environ):
    """The `cluster.cluster_task` of `tower_flags.define_cluster_flags`' flags.

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
    task = cluster.cluster_task(
        *hosts, flag_values.sync_replicas, flag_values.replicas_to_aggregate
    )
    if task.cluster is not None and not (
        flag_values.ps_hosts or flag_values.worker_hosts
    ):
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


def loss_scaling_from_flags(flag_values, compute_dtype, sync_replicas=False):
    """The `loss_scale.LossScaling` of `define_fp16_flags`' flags, or None.

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`.
      compute_dtype: the towers' compute dtype; only float16 is scaled.
      sync_replicas: bool, the cluster's --sync_replicas.

    Raises:
      ValueError: a loss-scale flag given for a run that computes not in
        float16 (`flag_checks.refuse_loss_scale`).
    """
    flag_checks.refuse_loss_scale(flag_values, compute_dtype)
    return loss_scale.loss_scaling(
        compute_dtype,
        flag_values.fp16_loss_scale,
        flag_values.fp16_enable_auto_loss_scale,
        flag_values.fp16_inc_loss_scale_every_n,
        sync_replicas,
    )


def cluster_settings(flag_values):
    """The settings every worker of a cluster must share: dict name -> value.

    Every flag the trainer defines (not absl's or TensorFlow's own) but
    `tower_flags.LOCAL_FLAGS`, with its value.

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`, passed by its
        `main`.
    """
    return {
        flag.name: flag.value
        for module, module_flags in flag_values.flags_by_module_dict().items()
        if not module.startswith(("absl", "tensorflow"))
        for flag in module_flags
        if flag.name not in tower_flags.LOCAL_FLAGS
    }
