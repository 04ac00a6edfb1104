"""The scaling model against measured steps: workers on shaped links.

Run it from the repository root, as root (network namespaces):
  python -m benchmarks.bench_links [--rates=20,50,100] [--workers=2,3,4]
      [--models=tutorial,resnet20] [--kinds=ps,packed,unpacked]
  python -m benchmarks.bench_links --predict=RESULT.json   # the model again

Each host (2, 3 or 4 workers, and the ps task of the ps kind) is a network
namespace of its own on one bridge, its link shaped with `tc qdisc ... tbf`
to each of --rates Mbit/s in turn, each way (`shaped_links`). A cluster per
model, kind and worker count runs the graph of cifar10_multi_gpu_train.py
(`bench_collective.worker_main`: one CPU tower per worker, --batch_size
examples of one random batch held in the graph) and its workers step
together: a round untimed, then at every rate and once on unshaped links
WARMUP_STEPS untimed and --steps timed, or as many more as the model
predicts in ROUND_SECS. The kinds:
  ps        a ps task and the workers, --variable_update=parameter_server
            (asynchronous, the TF1 default);
  packed    workers only, replicated, --gradient_pack_bytes at its default;
  unpacked  the same, each gradient all-reduced by itself (0);
  packed_float16  packed, the gradients sent as float16
            (--gradient_transfer_dtype=float16).
Replicated workers all-reduce their signal numbers with every step, as the
trainers do.

For each row: the measured step (the workers' mean seconds per step) and
examples per second (the workers' sum), beside the step the scaling model
predicts (`network_plan.cluster_step_secs`) for the same bytes, links and
compute, the compute being the same cluster's step on unshaped links (the
step's own work, the runtime's costs and the veth's gigabytes per second),
measured in the same run. --predict reprints the table of a stored result
(its --out) with the model's predictions made again, the model being
checked against measured steps, never fitted to them. Not root: says so and
exits 0. Every namespace
is deleted at the end, on failure too, and a round that takes more than
ROUND_DEADLINE_SECS ends the run.
"""

import json
import math
import select
import subprocess
import sys

import numpy as np
import tensorflow as tf

from benchmarks import bench_collective, common, shaped_links
from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import (
    collectives,
    dry_run,
    network_plan,
)

NAME = "links"
# A worker's server port, the same in every namespace.
PORT = 2222
# Seconds a round (start-up included, for the first) may take.
ROUND_DEADLINE_SECS = 600
# Seconds a timed round lasts at least, as the model predicts its steps.
ROUND_SECS = 8
# The kinds: (--variable_update, --gradient_pack_bytes, the stop all-reduce,
# --gradient_transfer_dtype).
KINDS = {
    "ps": ("parameter_server", 0, False, "float32"),
    "packed": ("replicated", collectives.PACK_BYTES_DEFAULT, True, "float32"),
    "unpacked": ("replicated", 0, True, "float32"),
    "packed_float16": (
        "replicated",
        collectives.PACK_BYTES_DEFAULT,
        True,
        "float16",
    ),
}


def _ints(text):
    return [int(each) for each in text.split(",")]


def start_cluster(made, kind, model_name, args):
    """Starts a kind's cluster on made's hosts: the ps on the first (if
    any), the workers on the others.

    Returns:
      The `subprocess.Popen`s: the workers', stdin and stdout piped, then
      the ps's (if any).
    """
    mode = KINDS[kind][0]
    ps_made = made[:1] if mode == "parameter_server" else []
    worker_made = made[len(ps_made) :]
    hosts = [
        ["%s:%d" % (host.address, PORT) for host in each]
        for each in (ps_made, worker_made)
    ]
    workers = [
        bench_collective.start_worker(
            shaped_links.in_host(
                host,
                bench_collective.worker_command(
                    KINDS[kind],
                    hosts,
                    index,
                    args.batch_size,
                    args.steps,
                    model_name,
                ),
            )
        )
        for index, host in enumerate(worker_made)
    ]
    ps = [
        subprocess.Popen(
            shaped_links.in_host(host, bench_collective.ps_command(*hosts)),
            stderr=subprocess.DEVNULL,
        )
        for host in ps_made
    ]
    return workers + ps


def timed_round(workers, steps, busiest):
    """One round on every worker at once.

    Args:
      workers: the workers' processes (`bench_collective.worker_main`).
      steps: int, the steps each times.
      busiest: the `shaped_links.Host` whose link carries the most (the
        ps's, or the first worker's).

    Returns:
      (mean seconds per step, examples per second of all workers, bytes
      the busiest host sent or received, the larger, per step of every
      worker).

    Raises:
      TimeoutError: a worker sent nothing within ROUND_DEADLINE_SECS.
    """
    before = shaped_links.counters(busiest)
    for worker in workers:
        worker.stdin.write("go %d\n" % steps)
        worker.stdin.flush()
    results = []
    for worker in workers:
        ready, _, _ = select.select(
            [worker.stdout], [], [], ROUND_DEADLINE_SECS
        )
        line = worker.stdout.readline() if ready else ""
        if not line:
            raise TimeoutError(
                "a worker sent no round within %d s" % ROUND_DEADLINE_SECS
            )
        results.append(json.loads(line))
    after = shaped_links.counters(busiest)
    # The WARMUP_STEPS are counted too.
    moved = max(b - a for a, b in zip(before, after))
    moved /= steps + common.WARMUP_STEPS
    step = float(np.mean([r["seconds"] for r in results])) / steps
    return step, sum(r["rate"] for r in results), moved


def measure_cluster(made, kind, model_name, planned, args):
    """The cluster's rounds: at each of --rates, then unshaped.

    A round times --steps steps, or more if they would take less than
    ROUND_SECS as the model predicts them.

    Args:
      made: the `shaped_links.Host`s of the cluster (the ps's first).
      kind: a key of KINDS.
      model_name: a key of `registry.MODELS`.
      planned: the bytes the model prices (`planned_bytes`) of the kind.
      args: the parsed flags.

    Returns:
      dict, rate in Mbit/s (None: unshaped) -> `timed_round`'s triple.
    """
    processes = start_cluster(made, kind, model_name, args)
    workers = processes[: len(made) - (kind == "ps")]
    try:
        # An untimed round first: a cluster's first steps move more bytes
        # than the next (at 20 Mbit/s, 1.35 times those of a later round).
        compute = timed_round(workers, args.steps, made[0])[0]
        rounds = {}
        for mbits in [*_ints(args.rates), None]:
            shaped_links.shape(made, mbits)
            step = compute
            if mbits is not None:
                step = network_plan.cluster_step_secs(
                    KINDS[kind][0], planned, len(workers), mbits, compute
                )
            steps = max(args.steps, math.ceil(ROUND_SECS / step))
            rounds[mbits] = timed_round(workers, steps, made[0])
        return rounds
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def planned_bytes(model_name, batch_size):
    """What the model prices of model_name's step, by kind: replicated, one
    copy's gradients as the ring sends them; ps, (in, out) of a ps
    cluster's worker (`network_plan.step_bytes` of its graph)."""
    task = cluster.cluster_task(
        "127.0.0.1:1", "127.0.0.1:2,127.0.0.1:3", "worker", 0
    )
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        train_op = bench_collective.worker_train_op(
            task,
            KINDS["ps"],
            batch_size,
            registry.MODELS[model_name],
        )
        planned = {
            kind: dry_run.gradient_bytes(graph, tf.as_dtype(variant[3]))
            for kind, variant in KINDS.items()
        }
        planned["ps"] = network_plan.step_bytes([train_op])
        return planned


def rows(made, model_name, args):
    """The table's rows of one model: a dict per kind, workers and rate."""
    planned = planned_bytes(model_name, args.batch_size)
    table = []
    for kind in args.kinds.split(","):
        for num_workers in _ints(args.workers):
            hosts = made[: num_workers + (kind == "ps")]
            rounds = measure_cluster(
                hosts, kind, model_name, planned[kind], args
            )
            compute = rounds.pop(None)[0]
            for mbits, (step, rate, moved) in rounds.items():
                predicted = network_plan.cluster_step_secs(
                    KINDS[kind][0], planned[kind], num_workers, mbits, compute
                )
                table.append(
                    {
                        "model": model_name,
                        "kind": kind,
                        "workers": num_workers,
                        "mbits": mbits,
                        "planned_bytes": planned[kind],
                        "busiest_link_bytes": int(moved),
                        "compute_secs": round(compute, 4),
                        "step_secs": round(step, 4),
                        "examples_per_sec": round(rate, 1),
                        "predicted_secs": round(predicted, 4),
                        "ratio": round(step / predicted, 3),
                    }
                )
            print(json.dumps(table[-len(rounds) :]), flush=True)
    return table


def predicted(table):
    """The rows of a stored run, their predictions made again by the model
    as it is now, from their measured compute and their bytes."""
    again = []
    for row in table:
        planned = row["planned_bytes"]
        step = network_plan.cluster_step_secs(
            KINDS[row["kind"]][0],
            tuple(planned) if isinstance(planned, list) else planned,
            row["workers"],
            row["mbits"],
            row["compute_secs"],
        )
        again.append(
            dict(
                row,
                predicted_secs=round(step, 4),
                ratio=round(row["step_secs"] / step, 3),
            )
        )
    return again


def markdown(table):
    """The rows as a Markdown table: measured, predicted, their ratio."""
    lines = [
        "| model | kind | workers | Mbit/s | compute s | step s | "
        "examples/s | predicted s | measured / predicted |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in table:
        lines.append(
            "| %(model)s | %(kind)s | %(workers)d | %(mbits)d | "
            "%(compute_secs).3f | %(step_secs).3f | %(examples_per_sec).1f "
            "| %(predicted_secs).3f | %(ratio).2f |" % row
        )
    return "\n".join(lines)


def main():
    """Measures every row on shaped links and reports the table."""
    args = common.parse_args(
        NAME,
        __doc__,
        rounds=1,
        steps=3,
        batch_size=32,
        rates="20,50,100",
        workers="2,3,4",
        models="tutorial,resnet20",
        kinds="ps,packed,unpacked",
        predict="",
    )
    if args.predict:
        try:
            with open(args.predict) as stored:
                rows_stored = json.load(stored)["rows"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(
                "bench_links: --predict=%s is no result of bench_links: %r"
                % (args.predict, e)
            )
        print(markdown(predicted(rows_stored)))
        return
    why_not = shaped_links.missing()
    if why_not:
        print("bench_links: skipped: %s" % why_not)
        return
    table = []
    with shaped_links.hosts(max(_ints(args.workers)) + 1) as made:
        for model_name in args.models.split(","):
            table += rows(made, model_name, args)
    common.report(args, {"unit": "seconds per step", "rows": table})
    print(markdown(table))


if __name__ == "__main__":
    main()
