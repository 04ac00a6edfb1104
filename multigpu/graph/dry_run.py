"""The GPU path without a GPU: the placement plan of a graph built for GPUs
(--dry_run), from the wheel's kernel registry, which holds the GPU kernels
even on a machine without a GPU.
"""

import collections
import functools

import tensorflow as tf

from multigpu import errors
from multigpu.graph import (
    all_reduce,
    network_plan,
    op_kernels,
    towers,
    variable_update,
)

# Op types that run on the host by design, wherever they are placed, and
# why; soft placement puts them there without a copy per step that matters.
HOST_OPS = {
    "input pipeline (tf.data on the host; each batch is copied once)": tuple(
        "IteratorV2 AnonymousIteratorV3 OneShotIterator IteratorGetNext "
        "MakeIterator RepeatDataset TensorDataset BatchDatasetV2 "
        "PrefetchDataset ShuffleDatasetV3 MapDataset "
        "ParallelMapDatasetV2".split()
    ),
    "summaries (serialised and written by the host)": tuple(
        "ScalarSummary HistogramSummary ImageSummary MergeSummary".split()
    ),
    "checkpoints (written and read by the host)": tuple(
        "SaveV2 RestoreV2 MergeV2Checkpoints ShardedFilename".split()
    ),
    "queues (host memory)": tuple(
        "FIFOQueueV2 QueueEnqueueV2 QueueDequeueV2 QueueDequeueManyV2 "
        "QueueSizeV2".split()
    ),
}


def gpu_devices(num_gpus):
    """['/gpu:0', ..., '/gpu:<num_gpus - 1>'], visible or not."""
    if num_gpus < 1:
        raise ValueError("--num_gpus must be at least 1, got %d" % num_gpus)
    return ["/gpu:%d" % i for i in range(num_gpus)]


def synthetic_batches(batch_shapes):
    """get_next of constant batches of batch_shapes ((shape, dtype)
    each), from a tf.data iterator on the CPU."""
    with tf.device("/cpu:0"):
        batch = tuple(tf.zeros(shape, dtype) for shape, dtype in batch_shapes)
        dataset = tf.data.Dataset.from_tensors(batch).repeat()
        return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next


def check(graph, batch_shapes, title, update=None, config=None):
    """Prints the placement plan of graph (update None: parameter_server;
    config None: the rewrite unchecked). Raises errors.TrainingError for an
    op on a GPU without a GPU kernel for its dtypes (soft placement would copy
    its tensors every step), or an op of the rewrite that could not run.
    """
    print(title)
    print(_device_table(graph))
    if update is not None and update.all_reduce is not None:
        print(_replicated_table(graph, batch_shapes, update))
    else:
        print(_transfer_table(transfer_plan(graph, batch_shapes), graph))
    if update is not None and update.mode == variable_update.ACROSS_WORKERS:
        print(
            network_plan.lines(
                gradient_bytes(graph),
                update.task.num_workers,
                len(update.devices),
                network_plan.flops_per_tower(graph, len(update.devices)),
                gradient_bytes(graph, update.transfer_dtype),
            )
        )
    print(_host_table(graph))
    missing = ops_without_gpu_kernel(graph)
    if config is not None:
        _check_rewrites(graph, config)
    if not missing:
        print("GPU ops without a GPU kernel in this TensorFlow build: none")
        return
    raise errors.TrainingError(
        "dry run: %d op(s) placed on a GPU have no GPU kernel for their "
        "dtypes in this TensorFlow build and would fall back to the CPU, "
        "copying their tensors every step: %s"
        % (len(missing), "; ".join(missing))
    )


def _check_rewrites(graph, config):
    unrunnable = op_kernels.unrunnable_rewrites(
        graph, config, op_kernels.has_gpu_kernel
    )
    if not unrunnable:
        print("Ops of Grappler's rewrite that could not run: none")
        return
    raise errors.TrainingError(
        "dry run: Grappler's rewrite of the graph adds %d op(s) that a "
        "session of this run could not run: %s"
        % (len(unrunnable), "; ".join(unrunnable))
    )


def _device_name(op):
    spec = tf.DeviceSpec.from_string(op.device)
    if spec.device_type is None:
        return "(unassigned)"
    return spec.to_string()


def _is_gpu(device):
    return tf.DeviceSpec.from_string(device).device_type == "GPU"


def _device_table(graph):
    ops = collections.Counter(_device_name(op) for op in graph.get_operations())
    params = collections.Counter()
    for var in towers.model_variables_with_copies(graph):
        params[_device_name(var.op)] += var.shape.num_elements()
    lines = [
        "Placement plan: ops and trainable parameters per device\n"
        "(unassigned: placed by TensorFlow beside the variable or input "
        "they read)"
    ]
    for device in sorted(ops):
        lines.append(
            "  %-36s %6d ops %12s parameters"
            % (device, ops[device], "{:,}".format(params[device]))
        )
    return "\n".join(lines)


TowerTransfer = collections.namedtuple(
    "TowerTransfer", "device variables_in gradients_out input_in"
)
TowerTransfer.__doc__ = """Bytes one tower moves per step (ints)."""


def transfer_plan(graph, batch_shapes):
    """A `TowerTransfer` per tower: each reads every variable held on
    another device once, sends its gradient back and receives its batch."""
    variables = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    batch_bytes = _batch_bytes(batch_shapes)
    plan, index = [], 0
    while True:
        name = "%s/%s_%d/total_loss" % (
            towers.TOWERS_SCOPE,
            towers.TOWER_NAME,
            index,
        )
        try:
            device = graph.get_operation_by_name(name).device
        except KeyError:
            return plan
        remote = sum(
            var.shape.num_elements() * var.dtype.base_dtype.size
            for var in variables
            if not _same_device(var.op.device, device)
        )
        plan.append(TowerTransfer(device, remote, remote, batch_bytes))
        index += 1


def _batch_bytes(batch_shapes):
    return sum(
        _num_elements(shape) * tf.as_dtype(dtype).size
        for shape, dtype in batch_shapes
    )


def gradient_bytes(graph, transfer_dtype=tf.float32):
    """The bytes of one tower's gradients, a float32 one counted in
    transfer_dtype (as they cross the workers)."""
    return sum(
        var.shape.num_elements()
        * (
            transfer_dtype.size
            if var.dtype.base_dtype == tf.float32
            else var.dtype.base_dtype.size
        )
        for var in graph.get_collection(
            tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES
        )
    )


def _replicated_table(graph, batch_shapes, update):
    batch_bytes = _batch_bytes(batch_shapes)
    peer = all_reduce.bytes_per_tower(
        gradient_bytes(graph), len(update.devices), update.all_reduce
    )
    lines = [
        "Bytes crossing devices per step, replicated: no variable crosses "
        "the host link;\nthe gradients are all-reduced (%s) between the "
        "towers:" % update.all_reduce
    ]
    for i, (device, (sent, received)) in enumerate(zip(update.devices, peer)):
        lines.append(
            "  tower %d on %s: host link in %s bytes (input batch); "
            "GPU-to-GPU out %s + in %s bytes"
            % (
                i,
                device,
                *("{:,}".format(n) for n in (batch_bytes, sent, received)),
            )
        )
    busiest = max(max(each) for each in peer)
    lines.append(
        "  total: %s bytes over host links, %s bytes over GPU-to-GPU links "
        "per step"
        % (
            "{:,}".format(batch_bytes * len(peer)),
            "{:,}".format(sum(s for s, _ in peer)),
        )
    )
    lines.append(
        "  at %.1f GB/s per host link (PCIe 3.0 x16): %.2f ms per step per "
        "tower;\n  the all-reduce at %.1f GB/s per direction (one NVLink 2.0 "
        "link): %.2f ms, at %.1f GB/s (PCIe peer to peer): %.2f ms on the "
        "busiest tower"
        % (
            network_plan.HOST_LINK_GB_PER_SEC,
            batch_bytes / network_plan.HOST_LINK_GB_PER_SEC / 1e6,
            network_plan.NVLINK_GB_PER_SEC,
            busiest / network_plan.NVLINK_GB_PER_SEC / 1e6,
            network_plan.HOST_LINK_GB_PER_SEC,
            busiest / network_plan.HOST_LINK_GB_PER_SEC / 1e6,
        )
    )
    return "\n".join(lines)


def _num_elements(shape):
    return functools.reduce(lambda a, b: a * b, shape, 1)


def _same_device(a, b):
    a, b = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
    return (a.job, a.task, a.device_type, a.device_index or 0) == (
        b.job,
        b.task,
        b.device_type,
        b.device_index or 0,
    )


def _transfer_table(plan, graph):
    homes = sorted(
        {
            _device_name(var.op)
            for var in graph.get_collection(
                tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES
            )
        }
    )
    lines = [
        "Bytes crossing devices per step (variables in + gradients out + "
        "input batch in)\nfrom the variables on %s and the input on the "
        "host:" % ", ".join(homes)
    ]
    for i, tower in enumerate(plan):
        lines.append(
            "  tower %d on %s: %s + %s + %s bytes"
            % (
                i,
                tower.device,
                "{:,}".format(tower.variables_in),
                "{:,}".format(tower.gradients_out),
                "{:,}".format(tower.input_in),
            )
        )
    total = sum(sum(t[1:]) for t in plan)
    slowest = max(sum(t[1:]) for t in plan)
    lines.append("  total: %s bytes per step" % "{:,}".format(total))
    if any(home.startswith("/job:ps") for home in homes):
        # No PCIe price: the variables are read over the network.
        lines.append(
            "  (cluster: the variables and gradients cross the network "
            "between the ps tasks and this worker)"
        )
        return "\n".join(lines)
    lines.append(
        "  at %.1f GB/s per link (PCIe 3.0 x16): %.2f ms per step on the "
        "busiest tower's link, %.2f ms if all share one link"
        % (
            network_plan.HOST_LINK_GB_PER_SEC,
            slowest / network_plan.HOST_LINK_GB_PER_SEC / 1e6,
            total / network_plan.HOST_LINK_GB_PER_SEC / 1e6,
        )
    )
    return "\n".join(lines)


def _host_reason(op):
    """Why op runs on the host by design, or None; an op without a GPU
    kernel whose outputs feed only such ops (a summary's tag) goes with them.
    """
    for reason, op_types in HOST_OPS.items():
        if op.type in op_types:
            return reason
    if op_kernels.has_gpu_kernel(op.node_def):
        return None
    consumers = [c for out in op.outputs for c in out.consumers()]
    reasons = {_host_reason(c) for c in consumers}
    if consumers and len(reasons) == 1 and None not in reasons:
        return reasons.pop()
    return None


def _host_table(graph):
    found = collections.defaultdict(collections.Counter)
    for op in graph.get_operations():
        reason = _host_reason(op)
        if reason is not None:
            found[reason][op.type] += 1
    lines = ["Ops on the host by design:"]
    for reason in sorted(found):
        counts = ", ".join(
            "%s x%d" % each for each in sorted(found[reason].items())
        )
        lines.append("  %s:\n    %s" % (reason, counts))
    return "\n".join(lines)


def ops_without_gpu_kernel(graph):
    """'NAME (TYPE, ATTR=DTYPE, ...) on DEVICE' of each op placed
    on a GPU with no GPU kernel for its dtypes, but `HOST_OPS`."""
    missing = []
    for op in graph.get_operations():
        if not _is_gpu(op.device) or op_kernels.has_gpu_kernel(op.node_def):
            continue
        if _host_reason(op) is None:
            missing.append(
                "%s (%s%s) on %s"
                % (
                    op.name,
                    op.type,
                    op_kernels.dtype_attrs(op.node_def),
                    op.device,
                )
            )
    return missing


def describe(devices, **settings):
    return (
        "Dry run for %d GPU(s), %s to %s; no session opened, nothing "
        "trained or saved.\n  %s"
        % (
            len(devices),
            devices[0],
            devices[-1],
            "\n  ".join("%s: %s" % each for each in settings.items()),
        )
    )


def refuse_ps(task):
    if task.job_name == "ps":
        raise ValueError(
            "--dry_run plans the graph of a worker; a ps task builds none "
            "(pass --job_name=worker)"
        )


def task_name(serves, job_name, task_index):
    """'worker:1' in a cluster, else 'none'."""
    if not serves:
        return "none"
    return "%s:%d" % (job_name, task_index)
