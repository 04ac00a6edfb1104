"""Collective ops between the workers of a cluster of workers only, every
tower of every worker holding a copy of the variables: the gradients'
all-reduce, the chief's values and the last worker's statistics
(`broadcast`), and every worker's stop signal.

The collectives meet only by their keys (`all_reduce.CollectiveKeys`,
counted as the graph is built): every worker must build the same ones, in
the same order, or they wait for each other until the operation timeout.
Packing (tf_cnn_benchmarks' gradient repacking) concatenates the gradients
of a dtype into pieces of about pack_bytes, as each collective has a fixed
cost; a 16-bit transfer_dtype halves the bytes (Horovod's fp16
compression), the sum rounded to it at every hop.
"""

import collections
import math

import tensorflow as tf

# The default of --gradient_pack_bytes: about the bytes of one all-reduce.
# benchmarks/bench_collective.py, 2 workers on loopback, the tutorial's 4.27
# MB of gradients in 10 tensors: 4 MiB packs trained 1.10x the examples per
# second of no packing (1.14x per CPU second); 1 MiB 0.88x, 256 KiB 0.79x.
PACK_BYTES_DEFAULT = 4 * 2**20

# TensorFlow's ring all-reduce: every device sends 2 (N - 1) / N of the bytes,
# whatever N; its ring visits the devices task by task.
RING = "ring"


def cluster_devices(num_workers, devices):
    """The full names of devices (one worker's) on every worker, worker
    by worker, e.g. '/job:worker/replica:0/task:1/device:CPU:0'."""
    return tuple(
        tf.DeviceSpec.from_string(device)
        .replace(job="worker", replica=0, task=task)
        .to_string()
        for task in range(num_workers)
        for device in devices
    )


Pack = collections.namedtuple("Pack", "dtype indices sizes shapes pieces")
Pack.__doc__ = """Gradients of one dtype all-reduced together; sizes and
pieces count elements, one all-reduce per piece of their concatenation."""


def pack_plan(grads, pack_bytes):
    """The `Pack`s of grads (None for none), in the order of the
    collectives to build; pack_bytes 0 for one all-reduce per gradient."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if pack_bytes <= 0:
        return [_pack(grads, [i], 1) for i in present]
    by_dtype = collections.OrderedDict()
    for i in present:
        by_dtype.setdefault(grads[i].dtype.base_dtype, []).append(i)
    packs = []
    for dtype, indices in by_dtype.items():
        total_bytes = sum(
            grads[i].shape.num_elements() * dtype.size for i in indices
        )
        packs.append(
            _pack(grads, indices, max(1, math.ceil(total_bytes / pack_bytes)))
        )
    return packs


def _pack(grads, indices, num_pieces):
    sizes = [grads[i].shape.num_elements() for i in indices]
    total = sum(sizes)
    num_pieces = min(num_pieces, total)
    # As even as can be: the first total % num_pieces pieces one larger.
    base, extra = divmod(total, num_pieces)
    pieces = [base + (1 if p < extra else 0) for p in range(num_pieces)]
    return Pack(
        grads[indices[0]].dtype.base_dtype,
        indices,
        sizes,
        [grads[i].shape for i in indices],
        pieces,
    )


def all_reduce_mean(
    tower_grads,
    devices,
    num_workers,
    keys,
    pack_bytes=0,
    transfer_dtype=tf.float32,
):
    """The mean of each gradient over every tower of every worker, a
    list of (mean, variable) per tower, on its device; the means come back
    float32 from their transfer_dtype (float32, float16 or bfloat16).
    """
    group = cluster_devices(num_workers, devices)
    ring = _Ring(len(group), keys.group_key(group), transfer_dtype)
    plan = pack_plan([g for g, _ in tower_grads[0]], pack_bytes)
    piece_keys = [[keys.instance_key() for _ in p.pieces] for p in plan]
    reduced = []
    for device, grads_and_vars in zip(devices, tower_grads):
        means = [g for g, _ in grads_and_vars]
        with tf.device(device):
            for pack, instance_keys in zip(plan, piece_keys):
                tensors = [means[i] for i in pack.indices]
                for i, mean in zip(
                    pack.indices,
                    _reduce_pack(tensors, pack, ring, instance_keys),
                ):
                    means[i] = mean
        reduced.append([(m, v) for m, (_, v) in zip(means, grads_and_vars)])
    return reduced


_Ring = collections.namedtuple("_Ring", "size key transfer_dtype")
_Ring.__doc__ = """A group of devices on a ring; transfer_dtype, the one a
float32 tensor crosses it in."""


def _reduce_pack(grads, pack, ring, instance_keys):
    """The mean gradients of one `Pack` over the ring."""
    grads = [tf.convert_to_tensor(g) for g in grads]
    if len(grads) == 1 and len(pack.pieces) == 1:
        return [_all_reduce(grads[0], ring, instance_keys[0])]
    # [sum(sizes)]: every gradient flattened, one after the other.
    flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
    pieces = tf.split(flat, pack.pieces) if len(pack.pieces) > 1 else [flat]
    flat = tf.concat(
        [
            _all_reduce(piece, ring, key)
            for piece, key in zip(pieces, instance_keys)
        ],
        axis=0,
    )
    return [
        tf.reshape(g, shape)
        for g, shape in zip(tf.split(flat, pack.sizes), pack.shapes)
    ]


def _all_reduce(tensor, ring, instance_key):
    """The mean of tensor over the ring, crossing in its transfer dtype."""
    sent = tensor
    if tensor.dtype == tf.float32 and ring.transfer_dtype != tf.float32:
        sent = tf.cast(tensor, ring.transfer_dtype)
    mean = _ring_sum(sent, ring, instance_key, "Div")
    return tf.cast(mean, tensor.dtype) if sent is not tensor else mean


def _ring_sum(tensor, ring, instance_key, final_op):
    """tensor summed over the ring, then final_op: 'Div' divides by the
    group size, 'Id' keeps the sum."""
    return tf.raw_ops.CollectiveReduceV2(
        input=tensor,
        group_size=ring.size,
        group_key=ring.key,
        instance_key=instance_key,
        ordering_token=[],
        merge_op="Add",
        final_op=final_op,
        communication_hint=RING,
    )


def broadcast(values, sender, task, keys, device):
    """The values of worker sender (its task index) on every worker;
    values have the same shapes and dtypes everywhere."""
    num_workers = task.num_workers
    group_key = keys.group_key(cluster_devices(num_workers, [device]))
    by_dtype = collections.OrderedDict()
    for i, value in enumerate(values):
        by_dtype.setdefault(value.dtype.base_dtype, []).append(i)
    received = list(values)
    for dtype, indices in by_dtype.items():
        sizes = [values[i].shape.num_elements() for i in indices]
        collective = dict(
            group_size=num_workers,
            group_key=group_key,
            instance_key=keys.instance_key(),
            communication_hint=RING,
        )
        with tf.device(device):
            if task.task_index == sender:
                # [sum(sizes)]: every value of the dtype, flattened.
                flat = tf.concat(
                    [tf.reshape(values[i], [-1]) for i in indices], axis=0
                )
                send = tf.raw_ops.CollectiveBcastSendV2(
                    input=flat, **collective
                )
                with tf.control_dependencies([send]):
                    for i in indices:
                        received[i] = tf.identity(values[i])
                continue
            flat = tf.raw_ops.CollectiveBcastRecvV2(
                shape=[sum(sizes)], T=dtype, **collective
            )
            pieces = tf.split(flat, sizes) if len(indices) > 1 else [flat]
            for i, piece in zip(indices, pieces):
                received[i] = tf.reshape(piece, values[i].shape)
    return received


def chief_values(variables, task, keys, device):
    """An op that gives every worker's variables the chief's values,
    restored or initialised."""
    values = [var.read_value() for var in variables]
    received = broadcast(values, 0, task, keys, device)
    if task.is_chief:
        return tf.group(*received, name="send_chief_values")
    assigns = []
    for var, value in zip(variables, received):
        with tf.device(var.device):
            assigns.append(var.assign(value).op)
    return tf.group(*assigns, name="take_chief_values")


# The keys of the stop collective: the graph's own allocator
# (`all_reduce.CollectiveKeys`) counts from 1 and never reaches them, so the
# stop collective collides with none of the graph's others.
STOP_GROUP_KEY = 2**31 - 1
STOP_INSTANCE_KEY = 1
# The graph collection of `stop_signals`' two tensors, which
# `interrupts.PreemptionHook` feeds and fetches.
STOP_SIGNALS = "stop_signals"


def stop_signals(task):
    """The stop collective, in the STOP_SIGNALS collection: (float32
    scalar placeholder of this worker's signal, 0 by default; float32
    [num_workers], every worker's)."""
    device = "/job:worker/replica:0/task:%d/device:CPU:0" % task.task_index
    with tf.device(device), tf.name_scope("stop_signals"):
        received = tf.compat.v1.placeholder_with_default(
            0.0, shape=[], name="signal"
        )
        # [num_workers]: the signal at this worker's place, 0 elsewhere.
        mine = received * tf.one_hot(task.task_index, task.num_workers)
        ring = _Ring(task.num_workers, STOP_GROUP_KEY, tf.float32)
        signals = _ring_sum(mine, ring, STOP_INSTANCE_KEY, "Id")
    for each in (received, signals):
        tf.compat.v1.add_to_collection(STOP_SIGNALS, each)
    return received, signals
