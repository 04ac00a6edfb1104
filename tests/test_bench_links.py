"""The scaling model's step on shaped links, and the benchmark that checks it.

The model's arithmetic is checked on given bytes and rates; one slow test
runs a slice of benchmarks/bench_links.py (one cluster of 2 workers, one
rate) in network namespaces, as root only, and reads its table. No test
asserts on a measured time or ratio.
"""

import json
import subprocess
import sys
import types

import pytest
import tensorflow as tf
from conftest import REPO

from benchmarks import bench_links, link_model, shaped_links
from multigpu.graph import dry_run, network_plan

# The tutorial's gradients, float32 (1,068,298 parameters).
TUTORIAL_BYTES = 4_273_192
# What tbf's rate carries of a TCP stream's bytes: 1,448 of 1,514.
SHARE = 1448 / 1514


def test_a_packed_step_is_the_unshaped_step_and_the_ring_bytes_at_the_rate():
    # 4 workers, one pack: each sends 2 x 3/4 of the gradients at 20
    # Mbit/s after the 0.2 s of compute, then the pack's own costs, the
    # unshaped step's 0.05 s beyond its compute (0.25 - 0.2).
    ring = 2 * 3 * TUTORIAL_BYTES // 4
    assert link_model.cluster_step_secs(
        "replicated", [TUTORIAL_BYTES], 4, 20, (0.25, 0.2)
    ) == pytest.approx(0.25 + ring * 8 / (20e6 * SHARE), rel=1e-12)


def test_an_all_reduces_own_costs_overlap_the_next_all_reduces_transfer():
    # 2 workers (the ring sends each all-reduce's bytes once) at 8 Mbit/s:
    # 1 s per 1e6 x SHARE bytes. 0.4 s of compute, 0.6 s unshaped: 0.2 s
    # of the all-reduces' own costs, 0.1 s each. The first crosses 0.4 to
    # 1.0 s, then its costs to 1.1 s, while the second crosses 1.0 to 1.3
    # s; its costs end the step at 1.4 s, not 1.5 (the transfers and the
    # costs one after the other). The ring's bytes are whole: within 1e-5 s.
    second = 1e6 * SHARE
    moved = [0.6 * second, 0.3 * second]
    assert link_model.cluster_step_secs(
        "replicated", moved, 2, 8, (0.6, 0.4)
    ) == pytest.approx(1.4, abs=1e-5)
    # A fast link (0.0006 s, then 0.0003 s): the worker's own costs bound
    # the step, 0.4 + 0.0006 + 0.1 + 0.1.
    assert link_model.cluster_step_secs(
        "replicated", moved, 2, 8000, (0.6, 0.4)
    ) == pytest.approx(0.6006, abs=1e-5)


def test_the_all_reduces_bytes_are_their_inputs_as_the_ring_sends_them():
    graph = tf.Graph()
    with graph.as_default():
        weights = tf.compat.v1.get_variable("weights", [100, 10])
        sums = [
            tf.raw_ops.CollectiveReduceV2(
                input=tensor,
                group_size=2,
                group_key=1,
                instance_key=key,
                ordering_token=[],
                merge_op="Add",
                final_op="Div",
            ).op
            for key, tensor in enumerate(
                [tf.cast(weights, tf.float16), tf.ones([3], tf.int64)]
            )
        ]
    # 1,000 values as float16, 3 as int64.
    assert network_plan.collective_bytes(sums) == [2_000, 24]


def test_a_ps_step_is_a_cycle_of_workers_queueing_for_the_ps_link():
    # 1 s of reads and 0.5 s of gradients on the link, 0.5 s of compute.
    reads = 8e6 * SHARE / 8
    moved = (reads, reads / 2)
    # One worker: compute, reads, gradients, one after the other.
    assert link_model.cluster_step_secs(
        "parameter_server", moved, 1, 8, 0.5
    ) == pytest.approx(2.0, rel=1e-12)
    # Two: mean value analysis. With one worker the reads' queue holds
    # 1 / 2 of a worker, the gradients' 0.5 / 2; with two each waits for
    # that share: 0.5 + 1 x 1.5 + 0.5 x 1.25 = 2.625 s.
    assert link_model.cluster_step_secs(
        "parameter_server", moved, 2, 8, 0.5
    ) == pytest.approx(2.625, rel=1e-12)
    # Many: the reads' way of the link bounds the cycle, 1 s a worker.
    assert link_model.cluster_step_secs(
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
        "before_reduce_secs": 0.0412,
        "step_secs": 0.8012,
        "examples_per_sec": 79.9,
        "predicted_secs": 0.7823,
        "ratio": 1.024,
        "load": 1.27,
    }
    assert bench_links.markdown([row]).split("\n")[2] == (
        "| tutorial | packed | 2 | 50 | 0.068 | 0.041 | 0.801 | 79.9 | 0.782 "
        "| 1.02 | 1.3 |"
    )


def test_a_ps_row_takes_the_compute_of_the_replicated_row_of_its_workers():
    # 1 s of reads and 0.5 s of gradients at 8 Mbit/s, one worker.
    reads = 8e6 * SHARE / 8
    common = {
        "model": "tutorial",
        "workers": 1,
        "mbits": 8,
        "step_secs": 1.8,
        "examples_per_sec": 17.8,
        "load": 0.5,
    }
    table = [
        dict(
            common,
            kind="packed",
            planned_bytes=[0],
            compute_secs=0.3,
            before_reduce_secs=0.2,
        ),
        dict(
            common,
            kind="ps",
            planned_bytes=[reads, reads / 2],
            compute_secs=0.5,
            before_reduce_secs=None,
        ),
    ]
    ps = bench_links.predicted(table)[1]
    # The replicated compute, not the ps cluster's unshaped step, which
    # moved the bytes too: 0.2 + 1 + 0.5.
    assert ps["predicted_secs"] == pytest.approx(1.7, abs=1e-4)
    assert ps["ratio"] == pytest.approx(1.8 / 1.7, abs=1e-3)
    # Alone, the ps row takes its unshaped step: 0.5 + 1.5, and the
    # table shows it as the compute.
    alone = bench_links.predicted(table[1:])
    assert alone[0]["predicted_secs"] == pytest.approx(2.0, abs=1e-4)
    assert (
        bench_links.markdown(alone)
        .split("\n")[2]
        .startswith("| tutorial | ps | 1 | 8 | 0.500 | 0.500 | 1.800 |")
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
    # The gradients in two packs of 4 MiB at most, then the stop
    # collective's float32 [2].
    half = TUTORIAL_BYTES // 2
    assert row["planned_bytes"] == [half, half, 8]
    compute = (row["compute_secs"], row["before_reduce_secs"])
    assert row["predicted_secs"] == pytest.approx(
        link_model.cluster_step_secs(
            "replicated", [half, half, 8], 2, 50, compute
        ),
        abs=2e-4,
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


def test_a_link_of_10_gbits_moves_1_25_gb_each_way_in_a_second():
    # Full duplex: the busier direction sets the time.
    assert network_plan.network_ms(1_250_000_000, 10**9, 10) == 1000.0
    assert network_plan.network_ms(0, 125_000_000, 100) == 10.0


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


def test_a_stored_row_is_priced_again_on_its_models_graph_as_it_is_now():
    stored = {"model": "tutorial", "kind": "packed", "planned_bytes": 1}
    args = types.SimpleNamespace(batch_size=8)
    (again,) = bench_links.planned_again([stored], args)
    # The tutorial's gradients in two packs of at most 4 MiB, then the
    # stop collective's float32 [2] (`collectives.stop_signals`).
    assert again["planned_bytes"] == [TUTORIAL_BYTES // 2] * 2 + [8]


def test_the_scaling_table_says_its_rows_were_not_measured_but_which_were():
    table = network_plan.scaling_table(TUTORIAL_BYTES, 10**9).split("\n")
    assert table[2] == (
        "  (the model of a step on links of a given rate was checked against "
        "measured steps by `python -m benchmarks.bench_links`, "
        "docs/cluster.md: the tutorial net and ResNet-20, 2, 3 and 4 workers "
        "of one CPU tower, replicated packed and unpacked and a ps cluster, "
        "at 20, 50 and 100 Mbit/s; none of the rows below, 8 GPUs a machine "
        "at Gb/s, was measured)"
    )
