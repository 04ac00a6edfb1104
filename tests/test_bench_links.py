"""The scaling model's step on shaped links, and the benchmark that checks it.

The model's arithmetic is checked on given bytes and rates; one slow test
runs a slice of benchmarks/bench_links.py (one cluster of 2 workers, one
rate) in network namespaces, as root only, and reads its table. No test
asserts on a measured time or ratio.
"""

import json
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import REPO

from benchmarks import bench_links, shaped_links
from multigpu.graph import dry_run, network_plan

# The tutorial's gradients, float32 (1,068,298 parameters).
TUTORIAL_BYTES = 4_273_192
# What tbf's rate carries of a TCP stream's bytes: 1,448 of 1,514.
SHARE = 1448 / 1514


def test_a_replicated_step_is_its_compute_and_the_ring_bytes_at_the_rate():
    # 4 workers: each sends 2 x 3/4 of the gradients, at 20 Mbit/s.
    ring = 2 * 3 * TUTORIAL_BYTES // 4
    assert network_plan.cluster_step_secs(
        "replicated", TUTORIAL_BYTES, 4, 20, 0.25
    ) == pytest.approx(0.25 + ring * 8 / (20e6 * SHARE), rel=1e-12)


def test_a_ps_step_is_a_cycle_of_workers_queueing_for_the_ps_link():
    # 1 s of reads and 0.5 s of gradients on the link, 0.5 s of compute.
    reads = 8e6 * SHARE / 8
    moved = (reads, reads / 2)
    # One worker: compute, reads, gradients, one after the other.
    assert network_plan.cluster_step_secs(
        "parameter_server", moved, 1, 8, 0.5
    ) == pytest.approx(2.0, rel=1e-12)
    # Two: mean value analysis. With one worker the reads' queue holds
    # 1 / 2 of a worker, the gradients' 0.5 / 2; with two each waits for
    # that share: 0.5 + 1 x 1.5 + 0.5 x 1.25 = 2.625 s.
    assert network_plan.cluster_step_secs(
        "parameter_server", moved, 2, 8, 0.5
    ) == pytest.approx(2.625, rel=1e-12)
    # Many: the reads' way of the link bounds the cycle, 1 s a worker.
    assert network_plan.cluster_step_secs(
        "parameter_server", moved, 40, 8, 0.5
    ) == pytest.approx(40.0, rel=1e-3)


def test_a_ps_workers_step_moves_each_read_of_a_variable_and_each_gradient():
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/job:ps/task:0"):
            weights = tf.compat.v1.get_variable(
                "weights", [100, 10], use_resource=True
            )
        with tf.device("/job:worker/task:0"):
            images = tf.ones([8, 100])
            loss = tf.reduce_sum(tf.matmul(images, weights))
            # A second read, as a weight decay makes.
            loss += tf.nn.l2_loss(weights)
            (grad,) = tf.gradients(loss, [weights])
        with tf.device("/job:ps/task:0"):
            step = weights.assign_sub(grad).op
    # The step and its loss: two reads of 4,000 bytes in, one gradient of
    # 4,000 out.
    assert network_plan.step_bytes([step, loss.op]) == (8_000, 4_000)


def test_the_table_gives_each_row_its_measured_and_predicted_step():
    row = {
        "model": "tutorial",
        "kind": "packed",
        "workers": 2,
        "mbits": 50,
        "compute_secs": 0.0681,
        "step_secs": 0.8012,
        "examples_per_sec": 79.9,
        "predicted_secs": 0.7823,
        "ratio": 1.024,
    }
    assert bench_links.markdown([row]).split("\n")[2] == (
        "| tutorial | packed | 2 | 50 | 0.068 | 0.801 | 79.9 | 0.782 | 1.02 |"
    )


@pytest.mark.slow
def test_a_slice_on_shaped_links_reports_its_row_and_removes_its_hosts(
    tmp_path,
):
    if shaped_links.missing():
        pytest.skip(shaped_links.missing())
    out = tmp_path / "links.json"
    bench = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_links"]
        + ["--models=tutorial", "--kinds=packed", "--workers=2"]
        + ["--rates=50", "--steps=1", "--batch_size=8", "--out=%s" % out],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = bench.communicate(timeout=900)
    finally:
        bench.kill()
    assert bench.returncode == 0, stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["model"], row["kind"], row["workers"], row["mbits"]) == (
        "tutorial",
        "packed",
        2,
        50,
    )
    # The ring's bytes of 2 workers, as priced: the gradients once.
    assert row["planned_bytes"] == TUTORIAL_BYTES
    assert row["predicted_secs"] == pytest.approx(
        network_plan.cluster_step_secs(
            "replicated", TUTORIAL_BYTES, 2, 50, row["compute_secs"]
        ),
        abs=1e-4,
    )
    assert row["ratio"] == pytest.approx(
        row["step_secs"] / row["predicted_secs"], abs=2e-3
    )
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, timeout=30
    ).stdout
    # Its namespaces are named after its process id.
    assert "bl%d" % (bench.pid % 100000) not in namespaces


def test_float16_transfer_halves_the_ring_bytes_the_dry_run_prices():
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.get_variable("weights", [100, 10])
        tf.compat.v1.get_variable("steps", [3], tf.int64)
    # 1,000 float32 parameters cross as float16; the int64 ones as they are.
    assert dry_run.gradient_bytes(graph) == 4_000 + 24
    assert dry_run.gradient_bytes(graph, tf.float16) == 2_000 + 24
    lines = network_plan.lines(TUTORIAL_BYTES, 2, 2, 10**9, TUTORIAL_BYTES // 2)
    # A ring of 4 devices, one link of each worker's 2 leaving the machine.
    ring = 2 * 3 * (TUTORIAL_BYTES // 2) // 4
    assert (
        "4,273,192 bytes of gradients (and of variables), 2,136,596 as the "
        "ring sends them:\n"
        "  replicated (ring of 4 devices): network out {0:,} + in {0:,}; "
        "inside the machine {0:,} each way;".format(ring)
    ) in lines
    # The ps cluster's worker still moves float32 gradients.
    assert "parameter_server (ps cluster): network out 4,273,192 + in " in (
        lines
    )


def test_a_stored_run_is_predicted_again_by_the_model_as_it_is_now():
    reads = 8e6 * SHARE / 8
    stored = {
        "model": "tutorial",
        "kind": "ps",
        "workers": 2,
        "mbits": 8,
        "planned_bytes": [reads, reads / 2],  # as JSON stores a pair
        "compute_secs": 0.5,
        "step_secs": 2.1,
        "predicted_secs": 1.0,
        "ratio": 2.1,
    }
    (again,) = bench_links.predicted([stored])
    assert (again["predicted_secs"], again["ratio"]) == (2.625, 0.8)
