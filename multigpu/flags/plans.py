"""The towers' plan: the trainers' flag choices made against their devices.

`cifar10_multi_gpu_train.main` makes its `TowerPlan` once from the flags'
plain values (`choices`) and hands it to the graph and the session; the
MNIST trainer takes the variable update alone (`update_of_choice`).
"""

import collections

from multigpu.distributed import cluster
from multigpu.flags import choices
from multigpu.graph import placement, variable_update

# How the towers compute and share their variables, as the flags choose.
#   devices: strs, one tower's device each.
#   update: the `variable_update.VariableUpdate` of --variable_update.
#   compute_dtype: tf.DType the layers compute in (--use_fp16).
#   config: the session's `ConfigProto`.
#   loss_scaling: the float16 loss scaling (`step_optimizer`), or None.
#   options: the `choices.TowerOptions` (--clip_gradients, --xla, ...).
TowerPlan = collections.namedtuple(
    "TowerPlan", "devices update compute_dtype config loss_scaling options"
)


def tower_plan(devices, task, update, precision, session, options):
    """The `TowerPlan` of the flags; prints the devices and the all-reduce.

    Args:
      devices: strs, one tower's device each.
      task: the `cluster.ClusterTask`.
      update: the `choices.UpdateChoice` of the flags.
      precision: the `choices.Precision` of the flags.
      session: (log_device_placement, operation_timeout_secs, options), the
        session's flags for `placement.session_config`.
      options: the `choices.TowerOptions` of the flags.
    """
    update = update_of_choice(devices, task, update)
    compute_dtype, loss_scaling = choices.dtypes(
        precision, devices, task.kind.sync
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
        places_variables=task.kind.places_variables,
        workers=variable_update.Workers(
            task, choice.pack_bytes, choice.transfer_dtype
        )
        if task.kind.all_reduce_across_workers
        else None,
    )
