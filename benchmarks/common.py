"""What every benchmark shares: timing, interleaving, results and graphs.

Not a benchmark itself. Each `bench_*.py` answers one question and is run
from the repository root as a module, e.g.:
  python -m benchmarks.bench_train
  python -m benchmarks.run_all          # all of them, and the ratio table

Timing rules, the same in every script:
- Variants are compared side by side in one process, interleaved A, B, A, B
  (`interleave`), and the median of the rounds is reported, because the 2
  cores are shared with other jobs.
- A rate is examples per wall-clock second; `cpu_rate` is examples per
  second of this process's CPU time (all threads), steadier under load.
- The 1-minute load average (`os.getloadavg`) before and after goes into
  every result, and each rate comes with `others_cores`: the cores other
  processes kept busy while it was timed (from /proc/stat).
- A ratio compares wall-clock rates when the machine was quiet, otherwise
  CPU rates, and says which (`ratio`).
- Nothing asserts on a time: the scripts measure and report.
"""

import argparse
import json
import os
import statistics
import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf

# cifar10_multi_gpu_train is the one script the benchmarks import (for its
# build_graph): two scripts' absl flags clash in one process.
import cifar10
import cifar10_multi_gpu_train
from benchmarks.machine import RESULTS_DIR
from cifar10_models import registry
from data_sets import cifar10_batches, cifar10_data
from multigpu.graph import placement, step_optimizer, summaries, variable_update
from verification import sessions
from verification.machine import cpu_info

CIFAR10_DATA_DIR = os.path.join(RESULTS_DIR, "cifar10_data")

BATCH_SIZE = 128  # The tutorial's batch, examples per step.
ROUNDS = 3  # Interleaved rounds per variant; the median is reported.
WARMUP_STEPS = 2  # Untimed steps before each timed run (caches, autotune).
# Below this many cores kept busy by other processes, a machine is quiet
# enough to compare wall-clock rates (see `ratio`).
QUIET_CORES = 0.25


def parse_args(name, doc, **options):
    """Parses --out, --rounds and the benchmark's own integer options.

    Args:
      name: str, the benchmark's name; the default result file is
        RESULTS_DIR/<name>.json.
      doc: str, the module docstring (its first line is the help text).
      **options: name=default for further options of the same type.

    Returns:
      The `argparse.Namespace`.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--out",
        default=os.path.join(RESULTS_DIR, name + ".json"),
        help="where to write the JSON result",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=options.pop("rounds", ROUNDS),
        help="interleaved rounds per variant (median reported)",
    )
    for option, default in options.items():
        parser.add_argument("--" + option, type=type(default), default=default)
    args = parser.parse_args()
    args.name = name
    args.load_start = os.getloadavg()[0]
    return args


def report(args, result):
    """Adds the run's context to result, writes it to args.out, prints it.

    Args:
      args: the namespace from `parse_args`.
      result: dict, JSON-serialisable; its "headline" maps the measures
        run_all.py tabulates to a number or to a `goal`.

    Returns:
      The completed dict.
    """
    result = {
        "benchmark": args.name,
        **result,
        "rounds": args.rounds,
        "load_1min": {"start": args.load_start, "end": os.getloadavg()[0]},
        "cpu_count": os.cpu_count(),
        "cpu": cpu_info(),
        "tensorflow": tf.__version__,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2), flush=True)
    return result


def report_rates(args, rates, headline):
    """Reports the examples/s of training variants and their headline.

    Args:
      args: the namespace from `parse_args` (with --steps).
      rates: dict variant -> the dict of `summarize`.
      headline: dict measure -> a number, a `ratio` or a `goal`.
    """
    return report(
        args,
        {
            "unit": "examples/s",
            "examples_per_step": BATCH_SIZE,
            "steps": args.steps,
            "rates": rates,
            "headline": headline,
        },
    )


def busy_cpu_seconds():
    """CPU seconds every process of the machine has spent busy, from boot.

    Read from /proc/stat (user, nice, system, irq, softirq, steal); None
    where there is no /proc.
    """
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    """Times a stretch of work: wall, this process's CPU, the others' CPU.

    `timed` uses it around a call; a callback can start and stop it.
    """

    def start(self):
        """Starts (or restarts) the clocks."""
        self._busy = busy_cpu_seconds()
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self, examples):
        """Stops the clocks.

        Args:
          examples: int, the examples processed since `start`.

        Returns:
          dict: rate (examples per wall second), cpu_rate (examples per CPU
          second of this process), others_cores (cores kept busy by other
          processes meanwhile: the contention the rate suffered), seconds
          (wall).
        """
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        result = {
            "rate": examples / wall,
            "cpu_rate": examples / max(cpu, 1e-9),
            "seconds": wall,
        }
        if self._busy is not None:
            others = (busy_cpu_seconds() - self._busy - cpu) / wall
            result["others_cores"] = max(0.0, others)
        return result


def timed(fn, examples):
    """Runs fn() once and returns its `Stopwatch.stop` throughput.

    Args:
      fn: callable with no arguments.
      examples: int, the examples fn processes.
    """
    stopwatch = Stopwatch()
    stopwatch.start()
    fn()
    return stopwatch.stop(examples)


def interleave(variants, rounds):
    """Runs every variant once per round, in turn: A, B, A, B, ...

    Args:
      variants: dict name -> callable() returning a `timed` dict.
      rounds: int.

    Returns:
      dict name -> `summarize` of its rounds.
    """
    samples = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            samples[name].append(run())
    return {name: summarize(each) for name, each in samples.items()}


def summarize(samples):
    """The median of each measure of some `timed` samples, and each rate.

    Returns:
      dict: the median of every numeric measure but 'seconds' (rate,
      cpu_rate, ...) and, if there is a rate, rates and cpu_rates: each
      sample's rate and CPU rate in the order run.
    """
    medians = {
        key: round(statistics.median(s[key] for s in samples), 2)
        for key, value in samples[0].items()
        if key != "seconds" and isinstance(value, (int, float))
    }
    if "rate" in medians:
        medians["rates"] = [round(s["rate"], 1) for s in samples]
        medians["cpu_rates"] = [round(s["cpu_rate"], 1) for s in samples]
    return medians


def ratio(numerator, denominator):
    """The ratio of two summarized rates, on the basis the load allows.

    On a quiet machine (other processes kept fewer than QUIET_CORES cores
    busy while either was timed) the ratio of wall-clock rates; otherwise
    the ratio of CPU rates (examples per CPU second of this process), since
    the wall rates then say more about the other jobs than about the code.

    Args:
      numerator, denominator: dicts from `summarize`.

    Returns:
      dict: value (on the chosen basis), basis ('wall' or 'per CPU
      second'), wall and cpu (both ratios).
    """
    wall = numerator["rate"] / denominator["rate"]
    cpu = numerator["cpu_rate"] / denominator["cpu_rate"]
    others = [r.get("others_cores", 0.0) for r in (numerator, denominator)]
    quiet = max(others) < QUIET_CORES
    return {
        "value": round(wall if quiet else cpu, 3),
        "basis": "wall" if quiet else "per CPU second",
        "wall": round(wall, 3),
        "cpu": round(cpu, 3),
    }


def goal(value, target, at_most=False):
    """A goal of the issue: the measured value, the target, met or not.

    Args:
      value: float, or a dict from `ratio`.
      target: float.
      at_most: bool, the goal is value <= target (default value >= target).

    Returns:
      dict for a result's "headline" (see `report`): the value (with the
      ratio's basis), the target, met.
    """
    result = dict(value) if isinstance(value, dict) else {"value": value}
    met = result["value"] <= target if at_most else result["value"] >= target
    result["target"] = ("<= %g" if at_most else ">= %g") % target
    result["met"] = bool(met)
    return result


def cifar10_data_dir():
    """Writes (once) the built-in CIFAR-10 sample set and returns its folder.

    The sample set is in the real binary record format: 5 x 2,000 training
    records and 10,000 test records.
    """
    cifar10_data.write_fake_data(CIFAR10_DATA_DIR)
    return CIFAR10_DATA_DIR


def synthetic_input(batch_size):
    """Returns get_next() for one fixed random batch held in the graph.

    Call it inside the graph; each call adds constants, so each tower gets
    its own copy on its own device, as with a real iterator.

    Returns:
      callable() -> (float32 [batch_size, 24, 24, 3], int32 [batch_size]).
    """
    rng = np.random.default_rng(0)
    shape = (batch_size, cifar10.IMAGE_SIZE, cifar10.IMAGE_SIZE, 3)
    images = rng.standard_normal(shape, dtype=np.float32)
    labels = (np.arange(batch_size) % cifar10.NUM_CLASSES).astype(np.int32)

    def get_next():
        return tf.constant(images), tf.constant(labels)

    return get_next


def real_input(batch_size, data_dir=None):
    """Returns get_next() of the trainers' pipeline on the sample set.

    `cifar10_batches.distorted_batches` on the CPU, one iterator shared by
    the towers as in cifar10_multi_gpu_train.py. Call it inside the graph.
    """
    with tf.device("/cpu:0"):
        return cifar10_batches.distorted_batches(
            data_dir or cifar10_data_dir(), batch_size
        )


class TrainGraph(NamedTuple):
    """A training graph built from the library, ready for a session."""

    graph: tf.Graph
    loss: tf.Tensor  # float32 scalar
    train_op: tf.Operation
    summary_op: object  # string scalar tensor, or None for merge_all
    init_op: tf.Operation
    devices: list
    examples_per_step: int
    # Session hooks of the trainer's graph (e.g. the first put of staged
    # input), given each new session as a MonitoredSession would.
    hooks: tuple = ()


def one_device_graph(make_input, batch_size, compute_dtype=tf.float32):
    """The graph of cifar10_train.py: input, inference, loss, `train`.

    Args:
      make_input: `synthetic_input` or `real_input`, called with batch_size
        inside the graph.
      batch_size: int, examples per step.
      compute_dtype: tf.float32 or tf.bfloat16 (--use_fp16 on a CPU).

    Returns:
      A `TrainGraph` on /cpu:0.
    """
    graph = tf.Graph()
    with graph.as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        with tf.device("/cpu:0"):
            images, labels = make_input(batch_size)()
        summaries.image_summary("images", images)
        logits = cifar10.inference(tf.cast(images, compute_dtype))
        loss = cifar10.loss(logits, labels)
        train_op = cifar10.train(loss, global_step, batch_size=batch_size)
        init_op = tf.compat.v1.global_variables_initializer()
    return TrainGraph(
        graph, loss, train_op, None, init_op, ["/cpu:0"], batch_size
    )


def tower_graph(
    make_input,
    num_towers,
    batch_size,
    compute_dtype=tf.float32,
    xla=False,
    prefetch=False,
    variable_device="cpu",
    model=registry.TUTORIAL,
    update_mode="parameter_server",
):
    """The graph of cifar10_multi_gpu_train.py on virtual CPU devices.

    Its own `build_graph`, fed by make_input instead of the files.

    Args:
      make_input: `synthetic_input` or `real_input`.
      num_towers: int, one tower per virtual CPU device.
      batch_size: int, examples per tower per step.
      compute_dtype: the dtype the layers compute in.
      xla, prefetch, variable_device, update_mode: the trainer's --xla,
        --prefetch_to_device, --variable_device and --variable_update
        (replicated all-reduces with TensorFlow's collective ops).
      model: the `registry.Model` of its --model.

    Returns:
      A `TrainGraph` whose step trains num_towers * batch_size examples.
    """
    devices = placement.tower_devices(num_towers, cpu_towers=True)
    graph = tf.Graph()
    with graph.as_default():
        loss, train_op, summary_op, hooks = cifar10_multi_gpu_train.build_graph(
            inputs=cifar10_multi_gpu_train.TowerInput(
                make_input(batch_size), batch_size, prefetch
            ),
            update=variable_update.variable_update(
                update_mode, devices, variable_device_choice=variable_device
            ),
            dtypes=step_optimizer.Dtypes(compute_dtype, None),
            model=model,
            options=cifar10_multi_gpu_train.StepOptions(xla=xla),
        )
        init_op = tf.compat.v1.global_variables_initializer()
    return TrainGraph(
        graph,
        loss,
        train_op,
        summary_op,
        init_op,
        devices,
        batch_size * num_towers,
        tuple(hooks),
    )


def start_session(model, config=None):
    """Opens a session on model's graph and initialises the variables.

    Args:
      model: a `TrainGraph`.
      config: a `ConfigProto`; default `placement.session_config` of the
        model's devices, as the trainers use.
    """
    sess = tf.compat.v1.Session(
        graph=model.graph,
        config=config or placement.session_config(model.devices),
    )
    sess.run(model.init_op)
    with model.graph.as_default():
        # Then the copies of replicated towers take tower 0's values.
        sess.run(sessions.local_init_op())
    for hook in model.hooks:
        hook.after_create_session(sess, None)
    return sess


def run_steps(sess, op, steps):
    """Runs op steps times (the body of every timed training loop)."""
    for _ in range(steps):
        sess.run(op)


def train_variant(model, steps, config=None):
    """Returns a variant for `interleave`: steps of model.train_op.

    The session stays open across rounds; each round runs WARMUP_STEPS
    untimed steps, then times `steps` steps.
    """
    sess = start_session(model, config)

    def run():
        run_steps(sess, model.train_op, WARMUP_STEPS)
        return timed(
            lambda: run_steps(sess, model.train_op, steps),
            steps * model.examples_per_step,
        )

    return run
