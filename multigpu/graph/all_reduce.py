"""All-reduce: every tower's gradients summed, the mean back on every tower.

The --all_reduce_spec engines: nccl (`NcclAllReduce`, GPUs only, a ring over
the GPU-to-GPU links), collective (`CollectiveReduceV2`, the ring algorithm,
CPU or GPU), one_device (the sum on the first tower's device, whose links
carry everything: for comparison), auto (nccl on GPUs, else collective).
"""

import itertools

import tensorflow as tf

ALL_REDUCE_CHOICES = ("auto", "nccl", "collective", "one_device")


class CollectiveKeys:
    """The keys of a graph's collective ops, all from this allocator:
    every process of a cluster builds the same collectives in the same order,
    so counting gives it the same group and instance keys.
    """

    def __init__(self):
        self._groups = {}
        self._instances = itertools.count(1)

    def group_key(self, devices):
        return self._groups.setdefault(tuple(devices), len(self._groups) + 1)

    def instance_key(self):
        return next(self._instances)


def algorithm(choice, devices):
    """'nccl', 'collective' or 'one_device', for --all_reduce_spec."""
    if choice not in ALL_REDUCE_CHOICES:
        raise ValueError(
            "--all_reduce_spec must be one of %s, got %r"
            % (", ".join(ALL_REDUCE_CHOICES), choice)
        )
    on_gpus = devices[0].startswith("/gpu")
    if choice == "auto":
        return "nccl" if on_gpus else "collective"
    if choice == "nccl" and not on_gpus:
        raise ValueError(
            "--all_reduce_spec=nccl needs GPU towers, got %s; use collective"
            % devices[0]
        )
    return choice


def all_reduce_mean(tower_grads, devices, method, keys):
    """A list (one per tower) of lists of (the towers' mean gradient on
    its device, its variable); a None gradient stays None."""
    num_towers = len(tower_grads)
    reduced = [[] for _ in tower_grads]
    for grads_and_vars in zip(*tower_grads):
        grads = [g for g, _ in grads_and_vars]
        if num_towers == 1 or any(g is None for g in grads):
            means = grads
        else:
            grads = [tf.convert_to_tensor(g) for g in grads]
            means = _REDUCERS[method](grads, devices, keys)
        for tower, (mean, (_, var)) in enumerate(zip(means, grads_and_vars)):
            reduced[tower].append((mean, var))
    return reduced


def _nccl_mean(grads, devices, keys):
    # The towers' ops of one all-reduce meet by their shared name.
    shared_name = "nccl_all_reduce_%d" % keys.instance_key()
    means = []
    for device, grad in zip(devices, grads):
        with tf.device(device):
            total = tf.raw_ops.NcclAllReduce(
                input=grad,
                reduction="sum",
                num_devices=len(grads),
                shared_name=shared_name,
            )
            means.append(total / len(grads))
    return means


def _collective_mean(grads, devices, keys):
    # The towers' ops of one all-reduce meet by their group and instance.
    group_key = keys.group_key(devices)
    instance_key = keys.instance_key()
    means = []
    for device, grad in zip(devices, grads):
        with tf.device(device):
            means.append(
                tf.raw_ops.CollectiveReduceV2(
                    input=grad,
                    group_size=len(grads),
                    group_key=group_key,
                    instance_key=instance_key,
                    ordering_token=[],
                    merge_op="Add",
                    final_op="Div",
                    communication_hint="ring",
                )
            )
    return means


def _one_device_mean(grads, devices, keys):
    with tf.device(devices[0]):
        mean = tf.add_n(grads) / len(grads)
    means = [mean]
    for device in devices[1:]:
        with tf.device(device):
            means.append(tf.identity(mean))
    return means


_REDUCERS = {
    "nccl": _nccl_mean,
    "collective": _collective_mean,
    "one_device": _one_device_mean,
}


def bytes_per_tower(gradient_bytes, num_towers, method):
    """(bytes sent, bytes received) per step of each tower, for
    gradient_bytes per tower: a ring sends and receives 2 (N - 1) / N of them
    (a reduce-scatter, then an all-gather, of N pieces); one_device moves
    (N - 1) of them in and out of the first device, one of each other.
    """
    if num_towers == 1:
        return [(0, 0)]
    if method == "one_device":
        first = (num_towers - 1) * gradient_bytes
        return [(first, first)] + [(gradient_bytes, gradient_bytes)] * (
            num_towers - 1
        )
    # A ring: N - 1 pieces of G / N out and in, twice.
    ring = 2 * (num_towers - 1) * gradient_bytes // num_towers
    return [(ring, ring)] * num_towers
