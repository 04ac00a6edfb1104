"""The one device's model of a gradient transfer in 2 bytes a value.

With --gradient_transfer_dtype=float16 (or bfloat16) the workers'
collective all-reduce carries every tower's float32 gradient in that dtype
and sums it there, rounding at every hop of TensorFlow's ring
(multigpu/graph/collectives.py). The one device of a transfer cell
repeats that rounding, written here from the ring's definition rather than
by calling the suite's collectives: each slice's gradient of its own loss
(a tower's), cast to the transfer dtype, summed as the ring sums, divided
by the number of slices in that dtype, and cast back to float32. What is
left between the towers and the one device is then float32's summation
noise, which the cell's measured tolerance holds, and a rounding put
elsewhere (after the sum, or none) lands out of it.

TensorFlow's ring (`RingReducer`, one subdivision for pieces under 4 MiB a
chunk) cuts the flattened tensor into one chunk per device, each of
ceil(n / devices) elements rounded up past a whole number of
CHUNK_ALIGN_BYTES (`chunk_elements`); chunk c starts on the device of rank
c and takes each next rank's values in turn, ((x_c + x_c+1) + x_c+2) +
..., each sum rounded to the transfer dtype; the last one divides by the
group size.
"""

import ml_dtypes
import numpy as np
import tensorflow as tf

# Eigen's EIGEN_MAX_ALIGN_BYTES in TensorFlow's x86 build: the ring's chunks
# start and end on it. tests/test_equivalence_transfer.py holds this model
# bit-equal to the runtime's CollectiveReduceV2 on 2 and 4 devices.
CHUNK_ALIGN_BYTES = 64
# The numpy types of the transfer dtypes (numpy has no bfloat16).
NUMPY_DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def ring_mean(values, transfer_dtype):
    """The mean of the devices' values as the ring computes it.

    Args:
      values: float32 [devices, n], each device's values in rank order.
      transfer_dtype: str, a key of NUMPY_DTYPES.

    Returns:
      float32 [n]: each value cast to transfer_dtype, summed chunk by chunk
      in the ring's order with every sum rounded, divided by the number of
      devices in transfer_dtype, cast back.
    """
    dtype = NUMPY_DTYPES[transfer_dtype]
    sent = np.asarray(values, np.float32).astype(dtype)
    devices, n = sent.shape
    mean = np.empty(n, dtype)
    size = chunk_elements(n, devices, sent.itemsize)
    for chunk in range(devices):
        part = slice(chunk * size, min(n, (chunk + 1) * size))
        total = sent[chunk, part]
        for step in range(1, devices):
            total = (total + sent[(chunk + step) % devices, part]).astype(dtype)
        mean[part] = (total / dtype(devices)).astype(dtype)
    return mean.astype(np.float32)


def chunk_elements(n, devices, element_bytes):
    """Elements of each of the ring's chunks of n (the last may be short
    or empty), as `CollectiveAdapter::AlignedChunkElts` counts them."""
    chunk_bytes = -(-n // devices) * element_bytes
    # Up to the next multiple of CHUNK_ALIGN_BYTES; a whole block more when
    # already on one (the runtime's arithmetic, which the test holds).
    chunk_bytes += CHUNK_ALIGN_BYTES - chunk_bytes % CHUNK_ALIGN_BYTES
    return chunk_bytes // element_bytes


def mean_gradients(optimizer, slice_losses, scale, transfer_dtype):
    """The slices' mean gradient, each slice's crossing in transfer_dtype.

    Args:
      optimizer: the model's optimizer (its compute_gradients).
      slice_losses: list of float32 scalars, each slice's whole loss, as a
        tower's; the slices are the ring's devices in rank order (worker by
        worker, tower by tower).
      scale: float, the towers' loss scale (1.0 for none): each slice's
        gradient is of scale * its loss, divided by scale before it crosses,
        as a tower's.
      transfer_dtype: str, a key of NUMPY_DTYPES.

    Returns:
      A list of (float32 mean gradient, variable); None where no slice has a
      gradient.
    """
    per_slice = [
        optimizer.compute_gradients(scale * loss) for loss in slice_losses
    ]
    means = []
    for grads_and_vars in zip(*per_slice):
        var = grads_and_vars[0][1]
        grads = [None if g is None else g / scale for g, _ in grads_and_vars]
        if any(g is None for g in grads):
            means.append((None, var))
            continue
        means.append((_ring_mean_op(grads, transfer_dtype), var))
    return means


def _ring_mean_op(grads, transfer_dtype):
    """`ring_mean` of same-shaped float32 gradients, in the graph."""
    # [devices, n]: each slice's gradient flattened.
    stacked = tf.stack([tf.reshape(g, [-1]) for g in grads])
    mean = tf.numpy_function(
        lambda values: ring_mean(values, transfer_dtype),
        [stacked],
        tf.float32,
        stateful=False,
    )
    return tf.reshape(mean, grads[0].shape)
