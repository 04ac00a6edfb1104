"""The model of a cluster's step on links of a given rate, which
bench_links holds against measured steps.

The step starts from two measured steps: the compute (the work before the
all-reduces) and the unshaped step, whose remainder is the all-reduces'
own costs on the worker. Replicated is a flow shop of two stages (each
all-reduce crosses the link, then takes its share of those costs,
overlapping the next transfer); every transfer starts after the compute,
as no overlap with the backward pass showed in the measured steps. The ps
cluster is a closed network of queues (`closed_cycle_secs`) on the ps's
link, its bytes counted in the worker's graph
(`network_plan.step_bytes`).
"""

from multigpu.graph import network_plan

# The share of a link's rate that carries a message's bytes: a full TCP
# segment holds 1,448 bytes of 1,514 on the wire (Ethernet, IPv4, and TCP
# with timestamps). Through tbf at 20, 50 and 200 Mbit/s one TCP stream
# moved 0.97, 0.96 and 0.95 of the rate.
PAYLOAD_SHARE = 1448 / 1514


def transfer_secs(num_bytes, mbits):
    """Seconds of num_bytes of messages over a link of mbits Mbit/s."""
    return num_bytes * 8 / (mbits * 1e6 * PAYLOAD_SHARE)


def cluster_step_secs(mode, moved, num_workers, mbits, compute_secs):
    """Seconds per step of each of num_workers one-tower workers,
    each host on its own link of mbits Mbit/s each way.

    Args:
      mode: 'replicated' (workers only) or 'parameter_server' (one ps task on
        a host of its own, the workers asynchronous).
      moved: replicated, the bytes of each all-reduce
        (`network_plan.collective_bytes`); parameter_server, (in, out) of a
        step (`network_plan.step_bytes`).
      compute_secs: parameter_server, the step's work (its think time);
        replicated, (the step on unshaped links, its work before the
        all-reduces).
    """
    if mode == "replicated":
        unshaped, before = compute_secs
        own = (unshaped - before) / len(moved)
        link = worker = before
        for each in moved:
            link += transfer_secs(
                network_plan.replicated_bytes(each, num_workers, 1)[0], mbits
            )
            worker = max(worker, link) + own
        return worker
    # Each worker reads, computes, sends, and again: its reads queue for
    # the ps link's one way, its gradients for the other.
    demands = [transfer_secs(each, mbits) for each in moved]
    return closed_cycle_secs(demands, compute_secs, num_workers)


def closed_cycle_secs(demands, think_secs, customers):
    """A customer's mean cycle in a closed network of queues, by
    mean value analysis (Reiser and Lavenberg, 1980).

    The ps cluster is one: each asynchronous worker (customer) reads the
    variables over one way of the ps link (demands: seconds of one service at
    each queue), computes (think_secs) and sends its gradients over the other.
    """
    queues = [0.0] * len(demands)
    for count in range(1, customers + 1):
        residences = [d * (1 + q) for d, q in zip(demands, queues)]
        cycle = think_secs + sum(residences)
        queues = [count * r / cycle for r in residences]
    return cycle
