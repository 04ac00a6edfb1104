"""A cluster of workers only: replicated variables, all-reduced gradients.

--variable_update=replicated with --worker_hosts and no --ps_hosts (or a
TF_CONFIG of a chief and workers, no ps): every tower of every worker holds
a copy of the variables, the gradients of all of them are all-reduced every
step (`collectives.all_reduce_mean`) and every copy takes the same update.
The chief (worker 0) restores the newest checkpoint or initialises; every
other worker initialises its own variables, then takes the chief's values
(`collectives.chief_values`: the weights, the optimizer's slots, the
statistics, the global step), all in the local init op of its session. The
moving averages, made after the update, start from each worker's own
values and are the chief's only in its checkpoints, which only the chief
writes, with the summaries. The batch-norm statistics of the step are the
last worker's last tower's, on every worker.

--variable_update=parameter_server keeps the TF1 ps cluster (`cluster`).

What TensorFlow's collective runtime needs, and gets here:
- the group leader (worker 0's task) in the config the server starts with,
  as well as the sessions' (in the session's config alone both workers
  wait forever); the server's config holds the CPU device count too;
- every worker in its own session on its own server, seeing only its own
  devices (the collectives reach the others through the servers);
- a bound on every step: a killed peer fails the others' step at once, a
  stopped (frozen) one would hold it forever without the operation timeout.
"""

import copy

# The task that resolves the collectives' groups: the chief, worker 0.
GROUP_LEADER = "/job:worker/replica:0/task:0"


def check_mode(variable_update, task):
    """Refuses a variable update that the task's cluster cannot run.

    Args:
      variable_update: str, --variable_update.
      task: the `cluster.ClusterTask`.

    Raises:
      ValueError: replicated in a cluster with ps tasks, or
        parameter_server in a cluster of workers only.
    """
    kind = task.kind
    if variable_update not in kind.variable_updates:
        if kind.all_reduce_across_workers:
            raise ValueError(
                "--variable_update=%s needs ps tasks, but the cluster has "
                "workers only (no --ps_hosts); pass "
                "--variable_update=replicated to all-reduce between the "
                "workers, or list ps tasks in --ps_hosts" % variable_update
            )
        raise ValueError(
            "--variable_update=replicated runs in a cluster of workers only,"
            " but --ps_hosts lists %d ps task(s); drop --ps_hosts (and the ps"
            " tasks) or pass --variable_update=parameter_server"
            % task.cluster.num_tasks("ps")
        )


def session_config(config, task):
    """The config of a worker's server and sessions in a cluster of workers.

    Args:
      config: the `ConfigProto` of `placement.session_config` (its device
        count gives the CPU towers their devices).
      task: the worker's `cluster.ClusterTask`, in a cluster of workers
        only.

    Returns:
      A copy of config: the group leader set, and the devices seen by the
      session limited to the worker's own (its collectives reach the
      others through the servers).
    """
    config = copy.deepcopy(config)
    config.experimental.collective_group_leader = GROUP_LEADER
    del config.device_filters[:]
    config.device_filters.append("/job:worker/task:%d" % task.task_index)
    return config
