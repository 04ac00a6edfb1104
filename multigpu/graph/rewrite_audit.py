"""The ops Grappler writes into a graph, checked before a session runs them.

A session hands its graph to Grappler, whose remapper fuses ops the graph
never held (Conv2D + BiasAdd + Relu into _FusedConv2D, MatMul + BiasAdd into
_FusedMatMul). A local session then lets oneDNN's pass rewrite those fused
ops into its own; a cluster worker first checks each node of its partition
against its op, and an op that allows not the node's dtype fails every
step (bfloat16 _FusedConv2D on a CPU: `cluster.may_fuse_ops`). The dry run
asks Grappler for the graph a session of the run's config would run, and
names each op Grappler added that its op, or a GPU kernel for its dtypes,
does not allow. Where the run's devices are not this machine's, Grappler
decides from the device names alone, as it would on the real machine.
"""

import tensorflow as tf
from tensorflow.python.framework import op_def_registry
from tensorflow.python.grappler import tf_optimizer


def rewritten_graph_def(graph, config):
    """The `GraphDef` a session of config would run: Grappler's rewrite.

    Every node that no other node reads is fetched, so that Grappler prunes
    nothing the run could ask for.
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
    """The ops Grappler adds to graph that a worker could not run.

    Args:
      graph: the run's `tf.Graph`.
      config: the `ConfigProto` of the run's sessions.
      has_gpu_kernel: callable(node_def) -> bool, whether a GPU kernel
        takes the node's dtypes.

    Returns:
      A list of 'NAME (TYPE, ATTR=DTYPE, ...) on DEVICE: WHY' strings.
    """
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
                % (node.name, node.op, _dtypes(node), node.device, why)
            )
    return found


def _disallowed(node):
    """Why node's op allows not its dtypes, or None."""
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


def _dtypes(node):
    return ", ".join(
        "%s=%s" % (key, tf.as_dtype(node.attr[key].type).name)
        for key in sorted(node.attr)
        if node.attr[key].HasField("type")
    )
