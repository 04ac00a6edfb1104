"""Speed levers that need no code change: oneDNN, threads, XLA.

Run it from the repository root (about 3 minutes; not part of run_all's
default set, add it with `python -m benchmarks.run_all --only=levers`):
  python -m benchmarks.bench_levers [--steps=8] [--rounds=2]

The one-device graph of cifar10_train.py through the real input pipeline,
trained in a child process per variant (an environment variable read when
TensorFlow loads can only be compared across processes), the children run
interleaved, one variant after the other, for --rounds rounds:
- shipped: TensorFlow's defaults (oneDNN kernels off on CPUs that lack
  AVX-512, e.g. this AMD EPYC with AVX2);
- onednn: TF_ENABLE_ONEDNN_OPTS=1;
- onednn_inter_op_1: the same with inter_op_parallelism_threads=1;
- xla: XLA auto-clustering on the CPU (TF_XLA_FLAGS=
  --tf_xla_cpu_global_jit and global_jit_level ON_1).
Across processes the wall rate moves with the load of the other jobs; the
CPU rate (examples per CPU second) is the steadier comparison, and
others_cores says how contended each sample was.
"""

import json
import os
import subprocess
import sys

import tensorflow as tf

from benchmarks import common, machine
from multigpu.graph import placement

NAME = "levers"
# name -> (environment variables, ConfigProto fields)
LEVERS = {
    "shipped": ({}, {}),
    "onednn": ({"TF_ENABLE_ONEDNN_OPTS": "1"}, {}),
    "onednn_inter_op_1": (
        {"TF_ENABLE_ONEDNN_OPTS": "1"},
        {"inter_op_parallelism_threads": 1},
    ),
    "xla": ({"TF_XLA_FLAGS": "--tf_xla_cpu_global_jit"}, {"xla": True}),
}
REPEATS = 3  # Timed segments per child, after the warm-up.


def child(name, steps):
    """Measures one lever in this process; prints its samples as JSON."""
    model = common.one_device_graph(common.real_input, common.BATCH_SIZE)
    config = placement.session_config()
    for field, value in LEVERS[name][1].items():
        if field == "xla":
            config.graph_options.optimizer_options.global_jit_level = (
                tf.compat.v1.OptimizerOptions.ON_1
            )
        else:
            setattr(config, field, value)
    run = common.train_variant(model, steps, config)
    print(json.dumps([run() for _ in range(REPEATS)]), flush=True)


def launch(name, steps):
    """Runs one child for lever name; returns its list of samples."""
    env = dict(os.environ, **LEVERS[name][0])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, "-m", "benchmarks.bench_levers"]
    command += ["--child=" + name, "--steps=%d" % steps]
    proc = subprocess.run(
        command,
        cwd=machine.REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])


def main():
    """Runs the children interleaved; reports each lever against shipped."""
    args = common.parse_args(NAME, __doc__, steps=8, rounds=2, child="")
    if args.child:
        return child(args.child, args.steps)
    samples = {name: [] for name in LEVERS}
    for _ in range(args.rounds):
        for name in LEVERS:
            samples[name] += launch(name, args.steps)
    rates = {name: common.summarize(each) for name, each in samples.items()}
    shipped = rates["shipped"]
    headline = {}
    for name in list(LEVERS)[1:]:
        each = common.ratio(rates[name], shipped)
        headline[name + "/shipped, wall"] = each["wall"]
        headline[name + "/shipped, per CPU second"] = each["cpu"]
    common.report(
        args,
        {
            "unit": "examples/s",
            "batch_size": common.BATCH_SIZE,
            "steps": args.steps,
            "levers": {
                name: {"env": env, "config": config}
                for name, (env, config) in LEVERS.items()
            },
            "rates": rates,
            "headline": headline,
        },
    )


if __name__ == "__main__":
    main()
