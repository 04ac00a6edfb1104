"""All-reduce: every tower's gradients summed, the mean back on every tower.

The replicated variable update (`variable_update`) all-reduces each
variable's gradient between the towers on TensorFlow's own engines:

  nccl        NVIDIA's NCCL (`NcclAllReduce`), GPUs only: a ring over the
              GPU-to-GPU links, the usual choice on GPUs.
  collective  TensorFlow's collective ops (`CollectiveReduce`) with the
              ring algorithm, on CPU or GPU devices.
  one_device  each tower sends its gradient to the first tower's device,
              which sums them and sends the mean back (for comparison: the
              first device's links carry everything).
  auto        nccl when the towers are GPUs, collective otherwise.

Bytes per step, for G bytes of gradients and N towers (`bytes_per_tower`):
a ring sends and receives 2 (N - 1) / N * G per tower (a reduce-scatter,
then an all-gather, of N pieces); one_device moves (N - 1) * G in and out of
the first device and G in and out of each other one.
"""

import tensorflow as tf
from tensorflow.python.ops import collective_ops, nccl_ops

ALL_REDUCE_CHOICES = ("auto", "nccl", "collective", "one_device")

# The group of the towers' collective ops: one group per process.
COLLECTIVE_GROUP_KEY = 1


def algorithm(choice, devices):
    """The all-reduce that runs on devices for the --all_reduce_spec choice.

    Args:
      choice: one of ALL_REDUCE_CHOICES.
      devices: the tower device strings.

    Returns:
      'nccl', 'collective' or 'one_device'.

    Raises:
      ValueError: an unknown choice, or nccl on CPU towers.
    """
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


def all_reduce_mean(tower_grads, devices, method):
    """The mean of each variable's gradient over the towers, on every tower.

    This is the synchronisation point of replicated towers: no copy is
    updated before every tower has sent its gradients.

    Args:
      tower_grads: list (one per tower, on devices[i]) of lists of
        (gradient, variable); the gradients of one index are of the same
        shape and dtype on every tower.
      devices: the tower device strings.
      method: 'nccl', 'collective' or 'one_device' (from `algorithm`).

    Returns:
      A list (one per tower) of lists of (mean gradient on that tower's
      device, that tower's variable); a None gradient stays None.
    """
    num_towers = len(tower_grads)
    reduced = [[] for _ in tower_grads]
    for index, grads_and_vars in enumerate(zip(*tower_grads)):
        grads = [g for g, _ in grads_and_vars]
        if num_towers == 1 or any(g is None for g in grads):
            means = grads
        else:
            grads = [tf.convert_to_tensor(g) for g in grads]
            means = _REDUCERS[method](grads, devices, index)
        for tower, (mean, (_, var)) in enumerate(zip(means, grads_and_vars)):
            reduced[tower].append((mean, var))
    return reduced


def _nccl_mean(grads, devices, index):
    num_towers = len(grads)
    sums = nccl_ops.all_sum(grads)
    means = []
    for device, total in zip(devices, sums):
        with tf.device(device):
            means.append(total / num_towers)
    return means


def _collective_mean(grads, devices, index):
    means = []
    for device, grad in zip(devices, grads):
        with tf.device(device):
            # One instance per variable: the towers' ops of a variable meet.
            means.append(
                collective_ops.all_reduce(
                    grad,
                    group_size=len(grads),
                    group_key=COLLECTIVE_GROUP_KEY,
                    instance_key=index + 1,
                    merge_op="Add",
                    final_op="Div",
                    communication_hint="ring",
                )
            )
    return means


def _one_device_mean(grads, devices, index):
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
    """The bytes each tower sends and receives per step.

    Args:
      gradient_bytes: int, the bytes of one tower's gradients.
      num_towers: int >= 1.
      method: 'nccl', 'collective' or 'one_device'.

    Returns:
      A list (one per tower) of (bytes sent, bytes received), ints.
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
