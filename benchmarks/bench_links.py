"""The scaling model against measured steps: workers on shaped links.

Run it from the repository root, as root (network namespaces):
  python -m benchmarks.bench_links [--rates=20,50,100] [--workers=2,3,4]
      [--models=tutorial,resnet20] [--kinds=packed,unpacked,ps]
  python -m benchmarks.bench_links --predict=RESULT.json[,MORE.json]
      # the model again, on the rows of stored runs (their --out), their
      # bytes priced again on the graphs as they are now

Each host (2, 3 or 4 workers, and the ps task of the ps kind) is a network
namespace of its own on one bridge, its link shaped with `tc qdisc ... tbf`
to each of --rates Mbit/s in turn, each way (`shaped_links`). A cluster per
model, kind and worker count runs the graph of cifar10_multi_gpu_train.py
(`bench_collective.worker_main`: one CPU tower per worker, --batch_size
examples of one random batch held in the graph) and its workers step
together: a round untimed; for the replicated kinds a round of the step's
work before its all-reduces (the compute); then at every rate and once on
unshaped links WARMUP_STEPS untimed and --steps timed, or as many more as
the model predicts in ROUND_SECS. The kinds:
  packed    workers only, replicated, --gradient_pack_bytes at its default;
  unpacked  the same, each gradient all-reduced by itself (0);
  ps        a ps task and the workers, --variable_update=parameter_server
            (asynchronous, the TF1 default);
  packed_float16  packed, the gradients sent as float16
            (--gradient_transfer_dtype=float16).
Replicated workers all-reduce their signal numbers with every step, as the
trainers do.

For each row: the measured step (the workers' mean seconds per step) and
examples per second (the workers' sum), beside the step the scaling model
predicts (`link_model.cluster_step_secs`) for the same bytes, links and
compute, all measured on this machine in the same run: the cluster's step
on unshaped links (the step's work, the runtime's costs and the bytes at
the veth's gigabytes per second) and the compute round (a ps row takes the
replicated rows' of its model and workers); and the cores the machine's
other processes kept busy meanwhile (the load: the machine is shared).
--predict reprints the table of stored results with the model's
predictions made again, the model being checked against measured steps,
never fitted to them. Not root: says so and exits 0. Every namespace is
deleted at the end, on failure too, and a round that takes more than
ROUND_DEADLINE_SECS ends the run.
"""

import json
import math
import select
import subprocess
import sys

import numpy as np
import tensorflow as tf

from benchmarks import bench_collective, common, link_model, shaped_links
from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import (
    collectives,
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


def timed_round(workers, steps, busiest, word="go"):
    """One round on every worker at once.

    Args:
      workers: the workers' processes (`bench_collective.worker_main`).
      steps: int, the steps each times.
      busiest: the `shaped_links.Host` whose link carries the most (the
        ps's, or the first worker's).
      word: 'go' (the step) or 'compute' (its work before the
        all-reduces).

    Returns:
      (mean seconds per step, examples per second of all workers, bytes
      the busiest host sent or received, the larger, per step of every
      worker, the workers' CPU seconds per step summed, the cores the
      machine's other processes (the ps's too) kept busy meanwhile).

    Raises:
      TimeoutError: a worker sent nothing within ROUND_DEADLINE_SECS.
    """
    before = shaped_links.counters(busiest)
    for worker in workers:
        worker.stdin.write("%s %d\n" % (word, steps))
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
    cpu = [r["rate"] * r["seconds"] / r["cpu_rate"] for r in results]
    # A worker's others_cores counts the other workers' CPU too.
    outside = np.mean(
        [
            r["others_cores"] - (sum(cpu) - mine) / r["seconds"]
            for r, mine in zip(results, cpu)
        ]
    )
    return (
        step,
        sum(r["rate"] for r in results),
        moved,
        sum(cpu) / steps,
        max(0.0, float(outside)),
    )


def measure_cluster(made, kind, model_name, planned, args):
    """The cluster's rounds: (replicated) the step's work before its
    all-reduces, then the step at each of --rates, then unshaped.

    A round times --steps steps, or more if they would take less than
    ROUND_SECS as the model predicts them.

    Args:
      made: the `shaped_links.Host`s of the cluster (the ps's first).
      kind: a key of KINDS.
      model_name: a key of `registry.MODELS`.
      planned: the bytes the model prices (`planned_bytes`) of the kind.
      args: the parsed flags.

    Returns:
      dict, rate in Mbit/s (None: unshaped; 'compute': before the
      all-reduces, replicated only) -> `timed_round`'s tuple.
    """
    processes = start_cluster(made, kind, model_name, args)
    workers = processes[: len(made) - (kind == "ps")]
    try:
        # An untimed round first: a cluster's first steps move more bytes
        # than the next (at 20 Mbit/s, 1.35 times those of a later round).
        row = {"compute_secs": timed_round(workers, args.steps, made[0])[0]}
        rounds = {}
        if kind != "ps":
            steps = max(args.steps, math.ceil(ROUND_SECS / row["compute_secs"]))
            rounds["compute"] = timed_round(workers, steps, made[0], "compute")
            row["before_reduce_secs"] = rounds["compute"][0]
        for mbits in [*_ints(args.rates), None]:
            shaped_links.shape(made, mbits)
            row.update(kind=kind, planned_bytes=planned, mbits=mbits)
            row["workers"] = len(workers)
            step = row["compute_secs"] if mbits is None else model_secs(row)
            steps = max(args.steps, math.ceil(ROUND_SECS / step))
            rounds[mbits] = timed_round(workers, steps, made[0])
        return rounds
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def model_secs(row):
    """The step the model predicts for a row (a dict of `rows`): its kind,
    planned_bytes, workers and mbits, and the compute measured: its
    compute_secs, and for replicated its before_reduce_secs."""
    planned = row["planned_bytes"]
    mode = KINDS[row["kind"]][0]
    compute = row["compute_secs"]
    if mode == "replicated":
        compute = (compute, row["before_reduce_secs"])
    elif row.get("before_reduce_secs") is not None:
        compute = row["before_reduce_secs"]
    return link_model.cluster_step_secs(
        mode,
        planned,
        row["workers"],
        row["mbits"],
        compute,
    )


def planned_bytes(model_name, batch_size):
    """What the model prices of model_name's step, by kind: replicated,
    the bytes of each all-reduce as the ring sends it
    (`network_plan.collective_bytes`); ps, (in, out) of a ps cluster's
    worker (`network_plan.step_bytes`), each of its graph."""
    planned = {}
    for kind, variant in KINDS.items():
        ps_hosts = "127.0.0.1:1" if kind == "ps" else ""
        task = cluster.cluster_task(
            ps_hosts, "127.0.0.1:2,127.0.0.1:3", "worker", 0
        )
        with (
            tf.Graph().as_default(),
            tf.compat.v1.device(cluster.device_setter(task)),
        ):
            train_op = bench_collective.worker_train_op(
                task, variant, batch_size, registry.MODELS[model_name]
            )
            planned[kind] = (
                network_plan.step_bytes([train_op])
                if kind == "ps"
                else network_plan.collective_bytes([train_op])
            )
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
            compute, _, _, compute_cpu, compute_load = rounds.pop(None)
            before = rounds.pop("compute", [None])[0]
            for mbits, (step, rate, moved, cpu, load) in rounds.items():
                row = {
                    "model": model_name,
                    "kind": kind,
                    "workers": num_workers,
                    "mbits": mbits,
                    "planned_bytes": planned[kind],
                    "busiest_link_bytes": int(moved),
                    "compute_secs": round(compute, 4),
                    "before_reduce_secs": before and round(before, 4),
                    "compute_cpu_secs": round(compute_cpu, 4),
                    "compute_load": round(compute_load, 2),
                    "cpu_secs": round(cpu, 4),
                    "load": round(load, 2),
                    "step_secs": round(step, 4),
                    "examples_per_sec": round(rate, 1),
                }
                table.append(_predicted(row))
            print(json.dumps(table[-len(rounds) :]), flush=True)
    return table


def _predicted(row):
    """row with the model's predicted_secs and the ratio measured /
    predicted."""
    step = model_secs(row)
    return dict(
        row,
        predicted_secs=round(step, 4),
        ratio=round(row["step_secs"] / step, 3),
    )


def predicted(table):
    """The rows, their predictions made (again) by the model as it is now,
    from their measured compute and their bytes.

    A ps row's compute is the replicated rows' of the same model and
    workers (before_reduce_secs, the first such row's: the same forward
    and backward pass with no transfer); with none in the table, its
    cluster's unshaped step (which also moves the bytes at the veth's
    speed: a longer compute).
    """
    before = {}
    for row in table:
        if row["kind"] != "ps":
            key = (row["model"], row["workers"])
            before.setdefault(key, row.get("before_reduce_secs"))
    return [
        _predicted(
            dict(
                row,
                before_reduce_secs=before.get(
                    (row["model"], row["workers"]),
                    row.get("before_reduce_secs"),
                ),
            )
            if row["kind"] == "ps"
            else row
        )
        for row in table
    ]


def planned_again(table, args):
    """The rows with their bytes priced again on their model's graph as it
    is now (`planned_bytes`, at --batch_size)."""
    planned = {
        name: planned_bytes(name, args.batch_size)
        for name in {row["model"] for row in table}
    }
    return [
        dict(row, planned_bytes=planned[row["model"]][row["kind"]])
        for row in table
    ]


def markdown(table):
    """The rows as a Markdown table: measured, predicted, their ratio, and
    the cores other processes kept busy (the load) while measured. The
    compute column is the compute the model took: a ps row's with no
    replicated row, its unshaped step."""
    lines = [
        "| model | kind | workers | Mbit/s | unshaped s | compute s | "
        "step s | examples/s | predicted s | measured / predicted | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for row in table:
        if row["before_reduce_secs"] is None:
            row = dict(row, before_reduce_secs=row["compute_secs"])
        lines.append(
            "| %(model)s | %(kind)s | %(workers)d | %(mbits)d | "
            "%(compute_secs).3f | %(before_reduce_secs).3f | %(step_secs).3f "
            "| %(examples_per_sec).1f | %(predicted_secs).3f | %(ratio).2f | "
            "%(load).1f |" % row
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
        kinds="packed,unpacked,ps",
        predict="",
    )
    if args.predict:
        rows_stored = []
        try:
            for name in args.predict.split(","):
                with open(name) as stored:
                    rows_stored += json.load(stored)["rows"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(
                "bench_links: --predict=%s is no result of bench_links: %r"
                % (args.predict, e)
            )
        print(markdown(predicted(planned_again(rows_stored, args))))
        return
    why_not = shaped_links.missing()
    if why_not:
        print("bench_links: skipped: %s" % why_not)
        return
    table = []
    with shaped_links.hosts(max(_ints(args.workers)) + 1) as made:
        for model_name in args.models.split(","):
            table += rows(made, model_name, args)
    table = predicted(table)
    common.report(args, {"unit": "seconds per step", "rows": table})
    print(markdown(table))


if __name__ == "__main__":
    main()
