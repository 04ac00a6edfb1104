"""The equivalence runner's cells across workers: processes on 127.0.0.1.

A cell across workers trains WORKERS worker tasks of a cluster of workers
only (--variable_update=replicated, the gradients all-reduced across them
by collective ops: multigpu/distributed/kinds.py), each a
process of verification/equivalence_worker.py on free ports of 127.0.0.1,
each on its share of the towers' batches. The runner compares the result
with one device that trains the global batch, under the same tolerance as
the cells in one process.

What is compared, as the cluster keeps it: the chief's variables (the
weights, the slots, the statistics, which are the last worker's last
tower's on every worker, the moving averages, which only the chief saves)
and the last worker's losses' averages, whose last tower is the one
device's last slice.

The asynchronous ps cluster is not here: each worker applies its own
gradient to variables the other moved meanwhile, so it trains what no one
device trains (docs/cluster.md). Nor is the synchronous one
(--sync_replicas): SyncReplicasOptimizer averages any replicas_to_aggregate
fresh gradients per step, whichever workers give them (its tokens are not
per worker), so a step is one device's on the global batch only when each
worker happened to give one.
"""

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from verification.equivalence_table import Case
from verification.processes import free_ports

WORKERS = 2  # Worker tasks of a cell.
# The update column of a cell across workers (a cluster of workers only).
UPDATE = "workers_only"
# The all-reduces that cross machines (in a cluster of workers only), and
# the --gradient_transfer_dtype each sends the float32 gradients in.
TRANSFER_DTYPES = {
    "collective": "float32",
    "collective_float16": "float16",
    "collective_bfloat16": "bfloat16",
}
ALL_REDUCES = tuple(TRANSFER_DTYPES)
# Seconds a cell's workers may take in all: a bound on a hang, for a loaded
# machine, not an expected time (a cell takes about a minute on 2 cores).
CELL_SECS = 900
# The name the trainers give the averages of the losses ('summaries/.../avg').
LOSS_AVERAGE = "/avg"


def cells(models, precisions):
    """The cells across workers: WORKERS workers of 1 and of 2 towers.

    Args:
      models, precisions: the runner's keys.

    Returns:
      A list of `Case`, each all-reduce x model x precision x towers.
    """
    return [
        Case(UPDATE, spec, model, precision, WORKERS * towers)
        for spec, model, precision, towers in itertools.product(
            ALL_REDUCES, models, precisions, (1, 2)
        )
    ]


def transfer_dtype(case):
    """The dtype name the cell's gradients cross the workers in: float32
    but in a cell across workers of a 2-byte --gradient_transfer_dtype."""
    if case.update != UPDATE:
        return "float32"
    return TRANSFER_DTYPES[case.all_reduce]


class WorkerFailed(Exception):
    """A worker of the cell exited with an error; the message names it."""


def train(case, images, labels, initial):
    """Trains the cell's WORKERS worker processes; returns what they hold.

    Args:
      case: the runner's `Case`: update UPDATE, case.towers the towers of
        all workers (a multiple of WORKERS).
      images: float32 [STEPS, case.towers, B, 24, 24, 3]; worker k trains
        the towers k * case.towers / WORKERS onwards.
      labels: int32 [STEPS, case.towers, B].
      initial: dict name -> array, the model's start (the chief's).

    Returns:
      values: dict name -> array: the chief's global variables but the
        losses' averages, which are the last worker's.
      copy_gaps: list of float, per step and worker the largest |copy -
        variable| of its towers.

    Raises:
      WorkerFailed: a worker exited with an error or did not end in time.
    """
    with tempfile.TemporaryDirectory() as folder:
        inputs = os.path.join(folder, "inputs.npz")
        np.savez(
            inputs,
            case=json.dumps(list(case)),
            images=images,
            labels=labels,
            **initial,
        )
        outputs = [
            os.path.join(folder, "worker%d.npz" % i) for i in range(WORKERS)
        ]
        hosts = ",".join("127.0.0.1:%d" % p for p in free_ports(WORKERS))
        _run(hosts, inputs, outputs)
        held = [dict(np.load(output)) for output in outputs]
    copy_gaps = [float(gap) for worker in held for gap in worker.pop("gaps")]
    values = {
        name: (held[-1] if name.endswith(LOSS_AVERAGE) else held[0])[name]
        for name in held[0]
    }
    return values, copy_gaps


def _run(hosts, inputs, outputs):
    """Runs the workers to their end, at most CELL_SECS; raises on failure.

    Each worker's stderr goes to OUTPUT.err, whose last line names a failure.
    """
    workers = []
    for index, output in enumerate(outputs):
        with open(output + ".err", "w") as stderr:
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "verification.equivalence_worker"]
                    + [hosts, str(index), inputs, output],
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            )
    deadline = time.monotonic() + CELL_SECS
    try:
        for worker in workers:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise WorkerFailed(
            "the workers did not end within %d s" % CELL_SECS
        ) from None
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    failures = [
        "worker task %d exited %d: %s"
        % (index, worker.returncode, _last_line(output + ".err"))
        for index, (worker, output) in enumerate(zip(workers, outputs))
        if worker.returncode
    ]
    if failures:
        raise WorkerFailed("; ".join(failures))


def _last_line(path):
    with open(path) as lines:
        return (lines.read().strip().splitlines() or ["(no output)"])[-1]
