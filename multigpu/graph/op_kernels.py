"""Which kernels this TensorFlow build registers, per op type and dtype.

The wheel carries the GPU kernels even on a machine without a GPU, and its
kernel registry says, per op type and dtype, whether one exists.
"""

import functools

import tensorflow as tf
from tensorflow.python.framework import kernels

# The kernel registry's device types that run on an NVIDIA GPU: 'DEFAULT'
# kernels are registered for every non-CPU device (e.g. ReadVariableOp).
GPU_KERNEL_DEVICE_TYPES = ("GPU", "DEFAULT")


def has_gpu_kernel(node_def):
    """Whether a GPU kernel of node_def's op accepts its dtype attrs."""
    for kernel in _gpu_kernels(node_def.op):
        if all(_allows(node_def, c) for c in kernel.constraint):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _gpu_kernels(op_type):
    registered = kernels.get_registered_kernels_for_op(op_type).kernel
    return tuple(
        k for k in registered if k.device_type in GPU_KERNEL_DEVICE_TYPES
    )


def _allows(node_def, constraint):
    if constraint.name not in node_def.attr:
        return True
    attr = node_def.attr[constraint.name]
    allowed = constraint.allowed_values.list.type
    dtypes = list(attr.list.type) if attr.HasField("list") else [attr.type]
    return all(t in allowed for t in dtypes)


def dtype_attrs(node_def):
    """', ATTR=DTYPE, ...': node_def's dtype attrs, for a message."""
    names = []
    for key in sorted(node_def.attr):
        attr = node_def.attr[key]
        if attr.HasField("type"):
            names.append("%s=%s" % (key, tf.as_dtype(attr.type).name))
    return "".join(", " + n for n in names)
