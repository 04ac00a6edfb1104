"""The equivalence runner's cells across workers: processes on 127.0.0.1.

A cell across workers trains two worker processes of a cluster of workers
only (verification/equivalence_workers.py) and holds the chief to one device
on the global batch; the passing cell is the fast slice's, which
docs/replicated.md runs (`python -m verification.equivalence --fast`, run by
tests/test_docs.py). Here, bugs that only the cluster's
all-reduce can make, planted in the workers' processes through a
sitecustomize module on their PYTHONPATH (the runner's own process, where
the one device trains, is left as it is).
"""

import os

import pytest

from verification import equivalence, equivalence_table, equivalence_workers

# One tower per worker: the cheapest cell that crosses the workers.
CASE = equivalence_table.Case(
    equivalence_workers.UPDATE, "collective", "layers", "float32", 2
)

# Every worker sums the workers' means instead of averaging them: the same
# numbers on every worker, so the copies stay equal and the settings agree.
SUMMED_ACROSS_WORKERS = """
from multigpu.graph import collectives

mean = collectives.all_reduce_mean


def summed(tower_grads, devices, num_workers, *args):
    return [
        [(None if g is None else g * num_workers, v) for g, v in tower]
        for tower in mean(tower_grads, devices, num_workers, *args)
    ]


collectives.all_reduce_mean = summed
"""

# The cheapest cell of a 2-byte transfer: float32 gradients crossing the
# workers in float16, which the one device rounds as the ring does.
FLOAT16_CASE = CASE._replace(all_reduce="collective_float16")

# Transfers in float16 done wrong, each on every worker (so the copies stay
# equal and the settings agree): the mean rounded to float16 after a float32
# sum instead of each gradient before it, and no rounding at all (the flag
# read but float32 sent).
_WRONG_TRANSFER = """
import tensorflow as tf

from multigpu.graph import collectives

reduce = collectives._all_reduce


def wrong(tensor, group, instance_key):
    size, key, transfer_dtype = group
    mean = reduce(tensor, (size, key, tf.float32), instance_key)
    return %s


collectives._all_reduce = wrong
"""
ROUNDED_AFTER_THE_SUM = _WRONG_TRANSFER % (
    "tf.cast(tf.cast(mean, transfer_dtype), tensor.dtype)"
)
NOT_ROUNDED = _WRONG_TRANSFER % "mean"

# Only the other worker would train another number of steps: the settings
# differ, and the agreement ends both workers before step 1.
OTHER_STEPS_ON_WORKER_1 = """
import sys

if sys.argv[2:3] == ["1"]:
    # The worker's folder, which python -m puts on the path after this.
    sys.path.insert(0, "")
    from verification import equivalence

    equivalence.STEPS = 2
"""


def _plant(monkeypatch, tmp_path, source):
    (tmp_path / "sitecustomize.py").write_text(source)
    path = [str(tmp_path), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))


@pytest.mark.slow
def test_workers_summing_instead_of_averaging_are_far_out(
    monkeypatch, tmp_path
):
    _plant(monkeypatch, tmp_path, SUMMED_ACROSS_WORKERS)

    result, _ = equivalence.run_cell(CASE)

    # Measured: 1,659,258 tolerances (180 in float16 with a fixed loss
    # scale, 2,250,799 on the tutorial net on 2 x 2 towers); the copies
    # stayed equal.
    assert result.worst > 20, result
    assert result.copy_gap == 0.0, result


@pytest.mark.slow
def test_a_worker_started_with_other_settings_fails_the_cell_naming_it(
    monkeypatch, tmp_path
):
    _plant(monkeypatch, tmp_path, OTHER_STEPS_ON_WORKER_1)

    result, _ = equivalence.run_cell(CASE)

    assert result.worst == float("inf")
    assert result.name == "; ".join(
        "worker task %d exited 1: verification.equivalence_worker: error: "
        "--max_steps differs between the workers: worker task 0 has 3, "
        "worker task 1 has 2; start every worker with the same --max_steps "
        "(docs/cluster.md)" % task
        for task in (0, 1)
    )


@pytest.mark.slow
def test_a_float16_transfer_trains_what_one_device_rounding_as_the_ring_does():
    result, _ = equivalence.run_cell(FLOAT16_CASE)

    assert result.moved, result
    assert result.worst <= 1.0, result
    assert result.copy_gap == 0.0, result


@pytest.mark.slow
def test_a_float16_transfer_rounded_elsewhere_is_out(monkeypatch, tmp_path):
    initial = equivalence.initial_values(FLOAT16_CASE)
    worst = {}
    reference = None
    for name, plant in [
        ("after the sum", ROUNDED_AFTER_THE_SUM),
        ("not rounded", NOT_ROUNDED),
    ]:
        _plant(monkeypatch, tmp_path, plant)
        result, reference = equivalence.run_cell(
            FLOAT16_CASE, initial, reference
        )
        worst[name] = result.worst

    # Measured: 512 to 1,948 and 517 to 1,973 tolerances over 4 runs of
    # each (the right transfer: 0.000).
    assert worst["after the sum"] > 20, worst
    assert worst["not rounded"] > 20, worst
