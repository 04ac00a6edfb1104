"""The dry run's plan of a cluster: bytes per worker per step, and scaling.

For W workers of T towers (N = W x T devices) and G bytes of gradients per
copy: replicated, the ring of N devices sends and receives 2 (N - 1) / N x
G per device, one of a worker's T ring links leaving the machine;
parameter_server, each tower reads every variable from the ps tasks. Links
are full duplex and do not overlap the compute (an upper bound).
"""

import tensorflow as tf

from multigpu.graph import all_reduce

# Network speeds the plan prices a step at, Gb/s (Ethernet or InfiniBand).
NETWORK_GBITS = (10, 25, 100)
# A GPU-to-GPU link inside a machine: one NVLink 2.0 link (V100), GB/s per
# direction; GPUs without NVLink talk peer to peer over PCIe.
NVLINK_GB_PER_SEC = 25.0
# The host link of a GPU: PCIe 3.0 x16, 15.75 GB/s per direction in theory,
# about 12 GB/s in NVIDIA's bandwidthTest.
HOST_LINK_GB_PER_SEC = 12.0
# Training FLOP/s of one GPU: a V100's 15.7 TFLOP/s of float32 at about half
# (what convolutional nets reach in practice).
ASSUMED_TFLOPS = 7.8
# The scaling table's machines: 8 GPUs each, from 1 GPU to 8 machines.
GPUS_PER_MACHINE = 8
TABLE_GPUS = (1, 2, 4, 8, 16, 32, 64)


def replicated_bytes(gradient_bytes, num_workers, towers):
    """(network out, network in, inside the machine) bytes per worker
    per step, each way, of the ring of every tower of every worker."""
    ring = all_reduce.bytes_per_tower(
        gradient_bytes, num_workers * towers, "collective"
    )[0][0]
    leaving = 1 if num_workers > 1 else 0
    return ring * leaving, ring * leaving, ring * (towers - leaving)


def ps_bytes(gradient_bytes, variable_bytes, towers):
    """The same bytes in a ps cluster."""
    return (
        gradient_bytes,
        towers * variable_bytes,
        towers * (gradient_bytes + variable_bytes),
    )


def network_ms(out_bytes, in_bytes, gbits):
    """Milliseconds of a full-duplex link of gbits Gb/s for the bytes."""
    return max(out_bytes, in_bytes) * 8 / (gbits * 1e9) * 1e3


def flops_per_tower(graph, num_towers):
    """The graph's registered FLOPs (fully defined shapes) / towers."""
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


def lines(gradient_bytes, num_workers, towers, tower_flops, sent_bytes=None):
    """The plan's lines: this cluster's bytes and times, then the table;
    sent_bytes: the gradients as the ring carries them, None: gradient_bytes.
    """
    sent_bytes = gradient_bytes if sent_bytes is None else sent_bytes
    text = [
        "Bytes per worker per step, %d worker(s) x %d tower(s), %s bytes of"
        " gradients (and of variables)%s:"
        % (
            num_workers,
            towers,
            _n(gradient_bytes),
            ""
            if sent_bytes == gradient_bytes
            else ", %s as the ring sends them" % _n(sent_bytes),
        )
    ]
    for name, (out, into, inside) in _modes(
        gradient_bytes, sent_bytes, num_workers, towers
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
    table = scaling_table(gradient_bytes, tower_flops, sent_bytes)
    return "\n".join(text + [table])


def _modes(gradient_bytes, sent_bytes, num_workers, towers):
    return [
        (
            "replicated (ring of %d devices)" % (num_workers * towers),
            replicated_bytes(sent_bytes, num_workers, towers),
        ),
        (
            "parameter_server (ps cluster)",
            ps_bytes(gradient_bytes, gradient_bytes, towers),
        ),
    ]


# What of the model was measured (benchmarks/link_model.py, docs/cluster.md).
CHECKED = (
    "  (the model of a step on links of a given rate was checked against "
    "measured steps by `python -m benchmarks.bench_links`, docs/cluster.md: "
    "the tutorial net and ResNet-20, 2, 3 and 4 workers of one CPU tower, "
    "replicated packed and unpacked and a ps cluster, at 20, 50 and 100 "
    "Mbit/s; none of the rows below, 8 GPUs a machine at Gb/s, was "
    "measured)"
)


def scaling_table(gradient_bytes, tower_flops, sent_bytes=None):
    """The step's communication against its compute, 1 to 64 GPUs."""
    sent_bytes = gradient_bytes if sent_bytes is None else sent_bytes
    compute_ms = tower_flops / (ASSUMED_TFLOPS * 1e12) * 1e3
    speeds = "/".join(str(g) for g in NETWORK_GBITS)
    rows = [
        "Scaling, %d GPUs per machine, one worker per machine; compute "
        "%.2f ms per GPU per step" % (GPUS_PER_MACHINE, compute_ms),
        "  (assumed: %s FLOPs per GPU per step at %.1f TFLOP/s; links full "
        "duplex, no overlap of transfer and compute; inside a machine one "
        "NVLink of %.0f GB/s per GPU for the ring, one PCIe link of %.0f "
        "GB/s per GPU for the ps cluster; one ps task per machine, holding its "
        "share of the variables, read once a tower a step: a lower bound, "
        "the suite's ps worker reads the tutorial's 4.0 times, "
        "network_plan.step_bytes)"
        % (
            _n(tower_flops),
            ASSUMED_TFLOPS,
            NVLINK_GB_PER_SEC,
            HOST_LINK_GB_PER_SEC,
        ),
        CHECKED,
        "  GPUs machines | replicated ms: network at %s Gb/s + NVLink | ps "
        "cluster ms: network at %s Gb/s + PCIe | efficiency at %d Gb/s: "
        "replicated, ps" % (speeds, speeds, NETWORK_GBITS[1]),
    ]
    for gpus in TABLE_GPUS:
        towers = min(gpus, GPUS_PER_MACHINE)
        workers = gpus // towers
        out, into, _ = replicated_bytes(sent_bytes, workers, towers)
        ring = all_reduce.bytes_per_tower(sent_bytes, gpus, "collective")
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
    return [network_ms(out, into, g) for g in NETWORK_GBITS] + [inside_ms]


def _columns(times):
    return "/".join("%.2f" % ms for ms in times[:-1]) + " + %.2f" % times[-1]


def _n(count):
    return "{:,}".format(count)


def step_bytes(fetches):
    """(in, out) ints: the bytes a worker's step (fetches) receives from
    and sends to the other jobs' tasks, once per task that uses a tensor; a
    variable read several times (its layer, its decay, the averages) crosses
    as many times.
    """
    crossing = {}
    for op in _needed(fetches):
        for tensor in op.inputs:
            here, there = _job(op), _job(tensor.op)
            if here != there:
                count = tensor.shape.num_elements() * tensor.dtype.size
                crossing[(tensor.name, here)] = (here == "worker", count)
    into = sum(n for to_worker, n in crossing.values() if to_worker)
    return into, sum(n for to_worker, n in crossing.values() if not to_worker)


def _job(op):
    """The job op runs in: its resource's (an op that reads or writes a
    variable runs beside it), else its device's, else its first input's.
    """
    resources = [t for t in op.inputs if t.dtype == tf.resource]
    if resources:
        return _job(resources[0].op)
    if not op.device and op.inputs:
        return _job(op.inputs[0].op)
    return tf.DeviceSpec.from_string(op.device).job


def collective_bytes(fetches):
    """The bytes of each CollectiveReduceV2 input of a step, in the
    order of the graph's ops."""
    needed = _needed(fetches)
    return [
        op.inputs[0].shape.num_elements() * op.inputs[0].dtype.size
        for op in fetches[0].graph.get_operations()
        if op in needed and op.type == "CollectiveReduceV2"
    ]


def _needed(fetches):
    run, stack = set(), list(fetches)
    while stack:
        op = stack.pop()
        if op not in run:
            run.add(op)
            stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return run
