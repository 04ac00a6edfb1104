"""Two workers on loopback: collective replicated against the ps cluster.

Run it from the repository root:
  python -m benchmarks.bench_collective [--steps=10] [--rounds=3]

Each variant is a cluster of processes on 127.0.0.1, all started at once
and kept up, so that the rounds interleave (A, B, C, A, B, C, ...):
- replicated_unpacked: 2 workers only, --variable_update=replicated, each
  gradient all-reduced by itself (--gradient_pack_bytes=0);
- replicated_packed_<N>: the same, gradients packed in pieces of about N
  bytes (the candidates for the flag's default);
- replicated_with_stop: packed as the flag's default, and each step also
  fetches the workers' signal numbers, as the trainers' hook does in a
  cluster of workers only (`collectives.stop_signals`, whose all-reduce
  every replicated variant's step holds: the update waits for it);
- ps_cluster: 1 ps task and 2 workers, --variable_update=parameter_server
  (asynchronous, the TF1 default: each worker reads every variable and
  sends its gradients to the ps every step).
Every worker runs the graph of cifar10_multi_gpu_train.py (its
`build_graph`) on one tower of --batch_size examples of one random batch
held in the graph; a round runs WARMUP_STEPS, then times --steps steps on
both workers at once. The rate is the cluster's: examples of both workers
per second of the slower one.

What loopback can show: the cost of the collective runtime and of gRPC per
byte and per message (serialising, copying, the ring's rounds), which
packing cuts. What it cannot: a network's bandwidth and latency (loopback
moves gigabytes per second), nor the ps links' congestion that all-reduce
avoids; on 2 shared cores the workers also take each other's CPU. The dry
run prices the network (`network_plan`).

Measured on 2 shared cores (Intel Xeon, AVX-512, no bfloat16; load 8 to
16), --steps=10 --rounds=3, batch 32 per worker: replicated unpacked 811
examples/s, packed 256 KiB 639, 1 MiB 716, 4 MiB 892; the ps cluster 452.
Replicated / ps cluster 1.80x wall, 1.17x per CPU second. The stop
all-reduce, measured when only replicated_with_stop's step held it (AMD
EPYC, AVX2, load 21): replicated_with_stop / packed 4 MiB 1.006x per CPU
second (wall 0.84x, in the noise of that load); every replicated variant
now holds it, and that ratio prices the hook's fetch alone.
"""

import functools
import json
import subprocess
import sys
import time

import tensorflow as tf

import cifar10_multi_gpu_train
from benchmarks import common
from cifar10_models import registry
from multigpu.distributed import cluster
from multigpu.graph import (
    collectives,
    placement,
    step_optimizer,
    variable_update,
)
from verification import processes, sessions

NAME = "collective"
NUM_WORKERS = 2
# Candidates for --gradient_pack_bytes (the tutorial's gradients: 4.27 MB).
PACK_BYTES = (2**18, 2**20, 4 * 2**20)


def worker_main(variant, hosts, index, batch_size, steps, model):
    """A worker of a variant: builds its graph, then runs a round per line.

    Reads 'go' lines on stdin; for each runs WARMUP_STEPS steps, times
    steps steps (N for a line 'go N') and prints the `common.timed` dict as
    one JSON line. A line 'compute N' does the same with the step's work
    before its all-reduces across workers (`compute_only`).

    Args:
      variant: (mode, pack_bytes, with_stop), and maybe the transfer
        dtype's name (default float32).
      hosts: (ps hosts, worker hosts), comma-separated HOST:PORT strs.
      index: int, the worker's task index.
      batch_size, steps: ints, examples per step, steps per round.
      model: the `registry.Model` of the towers.
    """
    ps_hosts, worker_hosts = hosts
    task = cluster.cluster_task(ps_hosts, worker_hosts, "worker", index)
    devices = placement.tower_devices(1, cpu_towers=True)
    config = cluster.task_config(
        placement.session_config(devices, operation_timeout_secs=300), task
    )
    server = tf.distribute.Server(task.cluster, "worker", index, config=config)
    with (
        tf.Graph().as_default(),
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        step = [worker_train_op(task, variant, batch_size, model)]
        if variant[2]:
            step.append(
                tf.compat.v1.get_collection(collectives.STOP_SIGNALS)[1]
            )
        fetches = {"go": step, "compute": compute_only(step)}
        with tf.compat.v1.Session(server.target, config=config) as sess:
            _initialise(sess, task)
            for line in sys.stdin:
                words = line.split()
                if words[:1] not in (["go"], ["compute"]):
                    break
                count = int(words[1]) if len(words) > 1 else steps
                run = fetches[words[0]]
                common.run_steps(sess, run, common.WARMUP_STEPS)
                result = common.timed(
                    functools.partial(common.run_steps, sess, run, count),
                    count * batch_size,
                )
                print(json.dumps(result), flush=True)


def worker_train_op(task, variant, batch_size, model):
    """Builds a worker's step in the default graph, under its device
    setter: one CPU tower of batch_size examples of one random batch.

    Args: as `worker_main`'s; task, the worker's `cluster.ClusterTask`.

    Returns:
      The train op.
    """
    mode, pack_bytes, _, *transfer_dtype = variant
    devices = placement.tower_devices(1, cpu_towers=True)
    update = variable_update.variable_update(
        mode,
        devices,
        places_variables=task.kind.places_variables,
        workers=variable_update.Workers(
            task, pack_bytes, (transfer_dtype or ["float32"])[0]
        )
        if task.kind.all_reduce_across_workers
        else None,
    )
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            common.synthetic_input(batch_size), batch_size
        ),
        update=update,
        dtypes=step_optimizer.Dtypes(tf.float32, None),
        model=model,
        task=task,
    )
    return train_op


def compute_only(step):
    """The work of step (a list of ops) before its all-reduces across
    workers: the ops that make the tensors its CollectiveReduceV2 ops
    take (the gradients, packed or cast, and the signal numbers); step
    itself where it has none (a ps cluster's worker). Not a tf.group of
    them: Grappler drops a NoOp's control inputs that have no side
    effects, and the group runs in a millisecond."""
    graph = step[0].graph
    taken = [
        op.inputs[0]
        for op in graph.get_operations()
        if op.type == "CollectiveReduceV2"
    ]
    return [tensor.op for tensor in taken] if taken else step


def _initialise(sess, task):
    """As the trainers' sessions: every worker of a cluster of workers only
    initialises and takes the chief's values; in the ps cluster the chief
    initialises and the other waits for it."""
    if task.kind.all_reduce_across_workers or task.is_chief:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(sessions.local_init_op())
        return
    uninitialised = tf.compat.v1.report_uninitialized_variables()
    while len(sess.run(uninitialised)):
        time.sleep(0.5)
    sess.run(sessions.local_init_op())


def free_hosts(count):
    """count HOST:PORT of free ports on 127.0.0.1."""
    return ["127.0.0.1:%d" % port for port in processes.free_ports(count)]


def ps_command(ps_hosts, worker_hosts):
    """The command of ps task 0 of the cluster: a server that serves."""
    spec = "{'ps': %r, 'worker': %r}" % (ps_hosts, worker_hosts)
    return [
        sys.executable,
        "-c",
        "import tensorflow as tf; tf.distribute.Server("
        "tf.train.ClusterSpec(%s), 'ps', 0).join()" % spec,
    ]


def worker_command(variant, hosts, index, batch_size, steps, model_name):
    """The command of a `worker_main` process (see its Args)."""
    ps_hosts, worker_hosts = hosts
    return [
        sys.executable,
        "-m",
        "benchmarks.bench_collective",
        "--worker=%d" % index,
        "--variant=%s" % json.dumps(variant),
        "--ps_hosts=%s" % ",".join(ps_hosts),
        "--worker_hosts=%s" % ",".join(worker_hosts),
        "--steps=%d" % steps,
        "--batch_size=%d" % batch_size,
        "--model=%s" % model_name,
    ]


def start_worker(command):
    """Starts a `worker_command`, its stdin and stdout piped for rounds."""
    return subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def start_variant(variant, args):
    """Starts a variant's ps task (if any) and workers.

    Returns:
      (workers, others): the workers' `subprocess.Popen`, stdin and stdout
      piped, and the other processes to end at the end.
    """
    mode = variant[0]
    worker_hosts = free_hosts(NUM_WORKERS)
    ps_hosts = free_hosts(1) if mode == "parameter_server" else []
    others = []
    if ps_hosts:
        others.append(
            subprocess.Popen(
                ps_command(ps_hosts, worker_hosts), stderr=subprocess.DEVNULL
            )
        )
    workers = [
        start_worker(
            worker_command(
                variant,
                (ps_hosts, worker_hosts),
                i,
                args.batch_size,
                args.steps,
                registry.TUTORIAL.name,
            )
        )
        for i in range(NUM_WORKERS)
    ]
    return workers, others


def round_variant(workers):
    """Returns a variant for `interleave`: one round on every worker."""

    def run():
        for worker in workers:
            worker.stdin.write("go\n")
            worker.stdin.flush()
        results = [json.loads(worker.stdout.readline()) for worker in workers]
        slowest = max(r["seconds"] for r in results)
        examples = sum(r["rate"] * r["seconds"] for r in results)
        cpus = [r["rate"] * r["seconds"] / r["cpu_rate"] for r in results]
        result = {
            "rate": examples / slowest,
            "cpu_rate": examples / sum(cpus),
            "seconds": slowest,
        }
        if all("others_cores" in r for r in results):
            # What a worker saw busy, but for the other workers of the run.
            result["others_cores"] = max(
                0.0,
                min(
                    r["others_cores"] - (sum(cpus) - cpu) / r["seconds"]
                    for r, cpu in zip(results, cpus)
                ),
            )
        return result

    return run


def main():
    """Starts every variant's cluster, interleaves their rounds, reports."""
    args = common.parse_args(NAME, __doc__, steps=10, batch_size=32)
    variants = {"replicated_unpacked": ("replicated", 0, False)}
    for pack_bytes in PACK_BYTES:
        variants["replicated_packed_%d" % pack_bytes] = (
            "replicated",
            pack_bytes,
            False,
        )
    default = collectives.PACK_BYTES_DEFAULT
    variants["replicated_with_stop"] = ("replicated", default, True)
    variants["ps_cluster"] = ("parameter_server", 0, False)
    started = {name: start_variant(v, args) for name, v in variants.items()}
    try:
        rates = common.interleave(
            {name: round_variant(w) for name, (w, _) in started.items()},
            args.rounds,
        )
    finally:
        for workers, others in started.values():
            for process in workers + others:
                process.kill()
                process.wait(timeout=30)
    best = max(
        (n for n in rates if n.startswith("replicated_packed")),
        key=lambda n: rates[n]["rate"],
    )
    headline = {
        "replicated (unpacked) / ps cluster": common.ratio(
            rates["replicated_unpacked"], rates["ps_cluster"]
        ),
        "%s / unpacked" % best: common.ratio(
            rates[best], rates["replicated_unpacked"]
        ),
        "with the signals fetched / without": common.ratio(
            rates["replicated_with_stop"],
            rates["replicated_packed_%d" % default],
        ),
    }
    common.report(
        args,
        {
            "unit": "examples/s of the 2 workers",
            "examples_per_step": NUM_WORKERS * args.batch_size,
            "steps": args.steps,
            "rates": rates,
            "headline": headline,
        },
    )


def _worker_from_argv(argv):
    """Runs `worker_main` from `worker_command`'s arguments."""
    options = dict(a[2:].split("=", 1) for a in argv)
    worker_main(
        tuple(json.loads(options["variant"])),
        (options["ps_hosts"], options["worker_hosts"]),
        int(options["worker"]),
        int(options["batch_size"]),
        int(options["steps"]),
        registry.MODELS[options["model"]],
    )


if __name__ == "__main__":
    if any(a.startswith("--worker=") for a in sys.argv[1:]):
        _worker_from_argv(sys.argv[1:])
    else:
        main()
