"""The dry run's plan of a cluster: bytes per worker per step, and scaling.

For W workers of T towers (N = W x T devices), G bytes of gradients and P
bytes of variables per copy (G = P: a gradient per variable, of its dtype):

  replicated (a cluster of workers only): TensorFlow's ring all-reduce of
    N devices, which visits them worker by worker. Each device sends and
    receives 2 (N - 1) / N x G (`all_reduce.bytes_per_tower`); of a
    worker's T ring links one leaves the machine (none when W = 1), the
    others join its own devices.
  parameter_server (the ps cluster): each tower reads every variable from
    the ps tasks (T x P in per worker), the worker's CPU averages its
    towers' gradients and sends the mean (G out); inside the machine the
    towers send their gradients to that CPU (T x G) and the variables reach
    them over the same host links (T x P). In the scaling table each
    machine runs a ps task with 1 / W of the variables: its network link
    carries (T x P + G) x (W - 1) / W each way.

Links are full duplex: a step's transfer takes the larger of in and out
over the link's speed, with no overlap with the compute (an upper bound;
TensorFlow starts an all-reduce once its gradients exist). The compute of a
step is the graph's FLOPs per tower at ASSUMED_TFLOPS.
"""

import tensorflow as tf

from multigpu.graph import all_reduce

# Network speeds the plan prices a step at, Gb/s (Ethernet or InfiniBand).
NETWORK_GBITS = (10, 25, 100)
# A GPU-to-GPU link inside a machine: one NVLink 2.0 link (V100), GB/s.
NVLINK_GB_PER_SEC = 25.0
# The host link of a GPU: PCIe 3.0 x16 as NVIDIA's bandwidthTest measures it.
HOST_LINK_GB_PER_SEC = 12.0
# Training FLOP/s of one GPU: a V100's 15.7 TFLOP/s of float32 at about half
# (what convolutional nets reach in practice).
ASSUMED_TFLOPS = 7.8
# The scaling table's machines: 8 GPUs each, from 1 GPU to 8 machines.
GPUS_PER_MACHINE = 8
TABLE_GPUS = (1, 2, 4, 8, 16, 32, 64)


def replicated_bytes(gradient_bytes, num_workers, towers):
    """(network out, network in, inside the machine) bytes per worker, each
    way, per step of the ring all-reduce of every tower of every worker."""
    ring = all_reduce.bytes_per_tower(
        gradient_bytes, num_workers * towers, "collective"
    )[0][0]
    leaving = 1 if num_workers > 1 else 0
    return ring * leaving, ring * leaving, ring * (towers - leaving)


def ps_bytes(gradient_bytes, variable_bytes, towers):
    """(network out, network in, inside the machine) bytes per worker per
    step of the ps cluster; inside: the towers' gradients to the worker's
    CPU and the variables to the towers."""
    return (
        gradient_bytes,
        towers * variable_bytes,
        towers * (gradient_bytes + variable_bytes),
    )


def network_ms(out_bytes, in_bytes, gbits):
    """Milliseconds of a full-duplex link of gbits Gb/s for the bytes."""
    return max(out_bytes, in_bytes) * 8 / (gbits * 1e9) * 1e3


def flops_per_tower(graph, num_towers):
    """The FLOPs of one tower's step: the graph's registered FLOPs / towers.

    Every op with FLOP statistics (the convolutions and matrix products
    forward and back, the element-wise ops of the update) is counted; the
    shapes must be fully defined.
    """
    options = (
        tf.compat.v1.profiler.ProfileOptionBuilder(
            tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        )
        .with_empty_output()
        .build()
    )
    logger = tf.get_logger()
    level = logger.level
    # The profiler warns of its own deprecated helpers.
    logger.setLevel("ERROR")
    try:
        profile = tf.compat.v1.profiler.profile(graph, options=options)
    finally:
        logger.setLevel(level)
    return profile.total_float_ops // num_towers


def lines(gradient_bytes, num_workers, towers, tower_flops):
    """The plan's lines: this cluster's bytes and times, then the table.

    Args:
      gradient_bytes: int, one copy's gradients (= its variables' bytes).
      num_workers: int, the cluster's workers.
      towers: int, towers per worker.
      tower_flops: int, FLOPs of one tower's step (`flops_per_tower`).
    """
    text = [
        "Bytes per worker per step, %d worker(s) x %d tower(s), %s bytes of"
        " gradients (and of variables):"
        % (
            num_workers,
            towers,
            _n(gradient_bytes),
        )
    ]
    for name, (out, into, inside) in _modes(
        gradient_bytes, num_workers, towers
    ):
        text.append(
            "  %s: network out %s + in %s; inside the machine %s each way;"
            "\n    over the network: %s"
            % (
                name,
                _n(out),
                _n(into),
                _n(inside),
                ", ".join(
                    "%.2f ms at %d Gb/s" % (network_ms(out, into, g), g)
                    for g in NETWORK_GBITS
                ),
            )
        )
    return "\n".join(text + [scaling_table(gradient_bytes, tower_flops)])


def _modes(gradient_bytes, num_workers, towers):
    return [
        (
            "replicated (ring of %d devices)" % (num_workers * towers),
            replicated_bytes(gradient_bytes, num_workers, towers),
        ),
        (
            "parameter_server (ps cluster)",
            ps_bytes(gradient_bytes, gradient_bytes, towers),
        ),
    ]


def scaling_table(gradient_bytes, tower_flops):
    """The step's communication against its compute, 1 to 64 GPUs."""
    compute_ms = tower_flops / (ASSUMED_TFLOPS * 1e12) * 1e3
    speeds = "/".join(str(g) for g in NETWORK_GBITS)
    rows = [
        "Scaling, %d GPUs per machine, one worker per machine; compute "
        "%.2f ms per GPU per step" % (GPUS_PER_MACHINE, compute_ms),
        "  (assumed: %s FLOPs per GPU per step at %.1f TFLOP/s; links full "
        "duplex, no overlap of transfer and compute; inside a machine one "
        "NVLink of %.0f GB/s per GPU for the ring, one PCIe link of %.0f "
        "GB/s per GPU for the ps cluster; one ps task per machine, holding its "
        "share of the variables)"
        % (
            _n(tower_flops),
            ASSUMED_TFLOPS,
            NVLINK_GB_PER_SEC,
            HOST_LINK_GB_PER_SEC,
        ),
        "  GPUs machines | replicated ms: network at %s Gb/s + NVLink | ps "
        "cluster ms: network at %s Gb/s + PCIe | efficiency at %d Gb/s: "
        "replicated, ps" % (speeds, speeds, NETWORK_GBITS[1]),
    ]
    for gpus in TABLE_GPUS:
        towers = min(gpus, GPUS_PER_MACHINE)
        workers = gpus // towers
        out, into, _ = replicated_bytes(gradient_bytes, workers, towers)
        ring = all_reduce.bytes_per_tower(gradient_bytes, gpus, "collective")
        replicated = _times(out, into, ring[0][0] / NVLINK_GB_PER_SEC / 1e6)
        # A machine's link carries its worker's reads and gradients to the
        # other machines' ps tasks, and their workers' to its own ps task.
        out, into, _ = ps_bytes(gradient_bytes, gradient_bytes, towers)
        each_way = (out + into) * (workers - 1) // workers
        ps = _times(
            each_way, each_way, gradient_bytes / HOST_LINK_GB_PER_SEC / 1e6
        )
        rows.append(
            "  %4d %8d | %s | %s | %3.0f%%, %3.0f%%"
            % (
                gpus,
                workers,
                _columns(replicated),
                _columns(ps),
                100
                * compute_ms
                / (compute_ms + replicated[1] + replicated[-1]),
                100 * compute_ms / (compute_ms + ps[1] + ps[-1]),
            )
        )
    return "\n".join(rows)


def _times(out, into, inside_ms):
    """[ms at each of NETWORK_GBITS..., inside_ms]."""
    return [network_ms(out, into, g) for g in NETWORK_GBITS] + [inside_ms]


def _columns(times):
    return "/".join("%.2f" % ms for ms in times[:-1]) + " + %.2f" % times[-1]


def _n(count):
    return "{:,}".format(count)
