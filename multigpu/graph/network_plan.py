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

The step of one-tower workers on links of a given rate (`cluster_step_secs`,
held against measured steps by benchmarks/bench_links.py) starts from two
steps measured with no link to wait for: the compute (the work before the
all-reduces) and the unshaped step, whose remainder is the all-reduces'
own costs on the worker (their messages and copies, CPU-bound on a veth).
Replicated: after the compute, each all-reduce (a gradient, or a pack;
`collective_bytes`) crosses the link in turn, its ring's bytes at
PAYLOAD_SHARE of the rate, and then takes its share of the own costs,
which overlap the next all-reduce's transfer (a flow shop of two stages,
link then worker). One pack: the compute, the transfer and the costs one
after the other; many all-reduces: the compute and the larger of the
transfers and the costs. Every transfer starts after the compute: an
overlap of the backward pass and the early gradients' transfers did not
show in the measured steps (on 2 busy cores the sends wait for the CPU
that computes). The ps cluster, a closed
network of queues (`closed_cycle_secs`): every worker reads over the ps's
one link, computes, and sends its gradients back over it (its
congestion), the bytes counted in the worker's graph (`step_bytes`), which
reads a variable once per use, not once per step; its think time is the
compute alone, not an unshaped step, which also moves those bytes.
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


def lines(gradient_bytes, num_workers, towers, tower_flops, sent_bytes=None):
    """The plan's lines: this cluster's bytes and times, then the table.

    Args:
      gradient_bytes: int, one copy's gradients (= its variables' bytes).
      num_workers: int, the cluster's workers.
      towers: int, towers per worker.
      tower_flops: int, FLOPs of one tower's step (`flops_per_tower`).
      sent_bytes: int, the gradients as the ring carries them
        (--gradient_transfer_dtype); None: gradient_bytes.
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


# What of the model was measured (`cluster_step_secs`, docs/cluster.md).
CHECKED = (
    "  (the model of a step on links of a given rate was checked against "
    "measured steps by `python -m benchmarks.bench_links`, docs/cluster.md: "
    "the tutorial net and ResNet-20, 2, 3 and 4 workers of one CPU tower, "
    "replicated packed and unpacked and a ps cluster, at 20, 50 and 100 "
    "Mbit/s; none of the rows below, 8 GPUs a machine at Gb/s, was "
    "measured)"
)


def scaling_table(gradient_bytes, tower_flops, sent_bytes=None):
    """The step's communication against its compute, 1 to 64 GPUs.

    sent_bytes: the gradients as the ring carries them; None:
    gradient_bytes.
    """
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
    """[ms at each of NETWORK_GBITS..., inside_ms]."""
    return [network_ms(out, into, g) for g in NETWORK_GBITS] + [inside_ms]


def _columns(times):
    return "/".join("%.2f" % ms for ms in times[:-1]) + " + %.2f" % times[-1]


def _n(count):
    return "{:,}".format(count)


# The share of a link's rate that carries a message's bytes: a full TCP
# segment holds 1,448 bytes of 1,514 on the wire (Ethernet, IPv4, and TCP
# with timestamps). Through tbf at 20, 50 and 200 Mbit/s one TCP stream
# moved 0.97, 0.96 and 0.95 of the rate.
PAYLOAD_SHARE = 1448 / 1514


def transfer_secs(num_bytes, mbits):
    """Seconds of num_bytes of messages over a link of mbits Mbit/s."""
    return num_bytes * 8 / (mbits * 1e6 * PAYLOAD_SHARE)


def step_bytes(fetches):
    """(in, out): the bytes a worker's step receives from and sends to the
    other jobs' tasks (a ps cluster's worker: from and to the ps tasks).

    Every tensor the step computes on one job and uses on another crosses
    once (the runtime sends a tensor once to each task that uses it); an
    op that reads or updates a variable runs beside it. A variable the
    step reads several times (by the model's layer, its weight decay, the
    moving averages) crosses as many times.

    Args:
      fetches: the ops of the step, e.g. [train_op], of a graph whose
        shapes are fully defined.

    Returns:
      (bytes in, bytes out), ints.
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
    """The job op runs in: its resource's (the runtime puts an op that
    reads or writes a variable beside it), else its device's, else, not
    placed, its first input's."""
    resources = [t for t in op.inputs if t.dtype == tf.resource]
    if resources:
        return _job(resources[0].op)
    if not op.device and op.inputs:
        return _job(op.inputs[0].op)
    return tf.DeviceSpec.from_string(op.device).job


def cluster_step_secs(mode, moved, num_workers, mbits, compute_secs):
    """The step of one-tower workers, each host on its own link.

    Args:
      mode: 'replicated' (workers only) or 'parameter_server' (one ps
        task on a host of its own, the workers asynchronous).
      moved: for replicated, the bytes of each all-reduce of one worker's
        step (`collective_bytes`); for parameter_server, (in, out) of a
        worker's step (`step_bytes`).
      num_workers: int.
      mbits: float, every host's link, Mbit/s each way.
      compute_secs: float, the step's work with no transfer (the ps
        cluster's think time); for replicated, (the step on unshaped
        links, its work before the all-reduces).

    Returns:
      float, seconds per step of each worker.
    """
    if mode == "replicated":
        unshaped, before = compute_secs
        own = (unshaped - before) / len(moved)
        link = worker = before
        for each in moved:
            link += transfer_secs(
                replicated_bytes(each, num_workers, 1)[0], mbits
            )
            worker = max(worker, link) + own
        return worker
    # Each worker reads, computes, sends, and again: its reads queue for
    # the ps link's one way, its gradients for the other.
    demands = [transfer_secs(each, mbits) for each in moved]
    return closed_cycle_secs(demands, compute_secs, num_workers)


def closed_cycle_secs(demands, think_secs, customers):
    """A customer's cycle in a closed network of queues, by mean value
    analysis (Reiser and Lavenberg, 1980).

    The ps cluster is one: each asynchronous worker (a customer) in turn
    reads the variables over the ps link's one way, computes on its own
    (the think time) and sends its gradients over the other way, and a
    way shared by several workers serves them in turn. One worker cycles
    in think_secs + sum(demands); many, at most one per max(demands), and
    the analysis gives the mean between.

    Args:
      demands: floats, the seconds of one customer's service at each
        queue (a way of the ps link).
      think_secs: float, the seconds a customer spends outside the queues.
      customers: int >= 1.

    Returns:
      float, the mean seconds of one customer's cycle.
    """
    queues = [0.0] * len(demands)
    for count in range(1, customers + 1):
        residences = [d * (1 + q) for d, q in zip(demands, queues)]
        cycle = think_secs + sum(residences)
        queues = [count * r / cycle for r in residences]
    return cycle


def collective_bytes(fetches):
    """The bytes of each all-reduce across workers (CollectiveReduceV2) of
    a step, as its input holds them (a gradient, a pack, cast or not).

    Args:
      fetches: the ops of the step, of a graph whose shapes are fully
        defined.

    Returns:
      A list of ints, in the order of the graph's ops.
    """
    needed = _needed(fetches)
    return [
        op.inputs[0].shape.num_elements() * op.inputs[0].dtype.size
        for op in fetches[0].graph.get_operations()
        if op in needed and op.type == "CollectiveReduceV2"
    ]


def _needed(fetches):
    """The set of ops fetches depend on, themselves included."""
    run, stack = set(), list(fetches)
    while stack:
        op = stack.pop()
        if op not in run:
            run.add(op)
            stack += [t.op for t in op.inputs] + list(op.control_inputs)
    return run
