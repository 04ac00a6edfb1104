"""Which kernels this TensorFlow build registers, per op type and dtype, and
the ops Grappler writes into a graph, checked before a session runs them.

Grappler's remapper fuses ops the graph never held (Conv2D + BiasAdd + Relu
into _FusedConv2D), and a cluster worker's op that allows not the node's
dtype fails every step (bfloat16 _FusedConv2D on a CPU). The dry run asks
Grappler for the graph the run's config would run (from the device names
alone, as on the real machine).
"""

import functools

import tensorflow as tf
from tensorflow.python.framework import kernels, op_def_registry
from tensorflow.python.grappler import tf_optimizer

from multigpu.graph import summaries, towers

# The kernel registry's device types that run on an NVIDIA GPU: 'DEFAULT'
# kernels are registered for every non-CPU device (e.g. ReadVariableOp).
GPU_KERNEL_DEVICE_TYPES = ("GPU", "DEFAULT")
# The kernel registry's device type of the CPU.
CPU_KERNEL_DEVICE_TYPES = ("CPU",)


def has_gpu_kernel(node_def):
    """Whether a GPU kernel of node_def's op accepts its dtype attrs."""
    return _has_kernel(node_def, GPU_KERNEL_DEVICE_TYPES)


def refuse_bfloat16_without_cpu_kernel(graph, compute_dtype):
    """Refuses before step 1 (TensorFlow would end it with 'No OpKernel
    was registered' and a long traceback) a bfloat16 op of graph without a CPU
    kernel; returns the number of ops that compute in bfloat16.
    """
    if compute_dtype != tf.bfloat16:
        return 0
    checked = [
        op
        for op in graph.get_operations()
        if _computes_in_bfloat16(op.node_def)
    ]
    # Once for all towers: each tower's op is named as tower 0's.
    missing = {
        "%s (%s%s) in layer %s"
        % (
            towers.strip_tower_prefix(op.name),
            op.type,
            dtype_attrs(op.node_def),
            _layer(op.name),
        ): None
        for op in checked
        if not _has_kernel(op.node_def, CPU_KERNEL_DEVICE_TYPES)
    }
    if missing:
        raise ValueError(
            "--use_fp16: %d op(s) compute in bfloat16, for which this "
            "TensorFlow build has no CPU kernel: %s; compute those layers "
            "in float32 (cast their input to float32 and their output "
            "back), or train without --use_fp16"
            % (len(missing), "; ".join(missing))
        )
    return len(checked)


def _computes_in_bfloat16(node_def):
    return any(
        tf.bfloat16.as_datatype_enum in _dtypes(attr)
        for attr in node_def.attr.values()
    )


def _layer(op_name):
    """The layer of an op: 'norm1' of 'towers/tower_0/model/norm1/LRN' and
    of its gradient, '.../gradients/towers/tower_0/model/norm1_grad/...'."""
    name = summaries.without_blocks(op_name.rsplit("gradients/", 1)[-1])
    layer = name.rsplit("/", 1)[0] if "/" in name else name
    return layer.replace("_grad", "")


def _has_kernel(node_def, device_types):
    for kernel in _kernels(node_def.op, device_types):
        if all(_allows(node_def, c) for c in kernel.constraint):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _kernels(op_type, device_types):
    registered = kernels.get_registered_kernels_for_op(op_type).kernel
    return tuple(k for k in registered if k.device_type in device_types)


def _allows(node_def, constraint):
    if constraint.name not in node_def.attr:
        return True
    allowed = constraint.allowed_values.list.type
    return all(t in allowed for t in _dtypes(node_def.attr[constraint.name]))


def _dtypes(attr):
    """The dtypes of an op's attr (none for an attr of another kind)."""
    if attr.HasField("list"):
        return list(attr.list.type)
    return [attr.type] if attr.HasField("type") else []


def dtype_attrs(node_def):
    """', ATTR=DTYPE, ...': node_def's dtype attrs, for a message."""
    names = []
    for key in sorted(node_def.attr):
        attr = node_def.attr[key]
        if attr.HasField("type"):
            names.append("%s=%s" % (key, tf.as_dtype(attr.type).name))
    return "".join(", " + n for n in names)


def rewritten_graph_def(graph, config):
    """The `GraphDef` a session of config would run: Grappler's
    rewrite, every node no other reads fetched, so nothing the run could ask
    for is pruned.
    """
    with graph.as_default():
        meta = tf.compat.v1.train.export_meta_graph(graph=graph)
    read = {
        name.lstrip("^").partition(":")[0]
        for node in meta.graph_def.node
        for name in node.input
    }
    # The optimizer's own list may name an op of a cond's branch function.
    fetches = meta.collection_def["train_op"].node_list
    fetches.Clear()
    fetches.value.extend(
        node.name for node in meta.graph_def.node if node.name not in read
    )
    return tf_optimizer.OptimizeGraph(config, meta)


def unrunnable_rewrites(graph, config, has_gpu_kernel):
    """'NAME (TYPE, ATTR=DTYPE, ...) on DEVICE: WHY' of each op
    Grappler adds to graph under config that a worker could not run."""
    own_types = {op.type for op in graph.get_operations()}
    found = []
    for node in rewritten_graph_def(graph, config).node:
        if node.op in own_types:
            continue
        why = _disallowed(node)
        on_gpu = tf.DeviceSpec.from_string(node.device).device_type == "GPU"
        if why is None and on_gpu and not has_gpu_kernel(node):
            why = "no GPU kernel for its dtypes"
        if why is not None:
            found.append(
                "%s (%s, %s) on %s: %s"
                % (node.name, node.op, _dtype_names(node), node.device, why)
            )
    return found


def _disallowed(node):
    op_def = op_def_registry.get(node.op)
    for attr in op_def.attr if op_def else ():
        allowed = attr.allowed_values.list.type
        if attr.type == "type" and allowed:
            if node.attr[attr.name].type not in allowed:
                return "the op %s allows no %s for %s" % (
                    node.op,
                    tf.as_dtype(node.attr[attr.name].type).name,
                    attr.name,
                )
    return None


def _dtype_names(node):
    return ", ".join(
        "%s=%s" % (key, tf.as_dtype(node.attr[key].type).name)
        for key in sorted(node.attr)
        if node.attr[key].HasField("type")
    )
