"""--trace_step: a Chrome trace and run metadata of one step."""

import collections
import json

import pytest
import tensorflow as tf
from conftest import checkpoint_steps, read_events, run_script

from multigpu.run import trace


def _step_stats(device_spans):
    """A StepStats with one op per (start, duration) of each device."""
    stats = tf.compat.v1.RunMetadata().step_stats
    for device, spans in device_spans.items():
        dev_stats = stats.dev_stats.add(device=device)
        for start, duration in spans:
            dev_stats.node_stats.add(
                all_start_micros=start, all_end_rel_micros=duration
            )
    return stats


def test_a_devices_busy_share_counts_overlapping_ops_once():
    stats = _step_stats(
        {
            "/device:GPU:1": [(0, 50), (25, 50)],  # busy 0..75
            "/device:GPU:0": [(0, 10), (90, 10)],  # busy 20 of 100
        }
    )

    shares = trace.busy_shares(stats)

    assert list(shares.items()) == [
        ("/device:GPU:0", 0.2),
        ("/device:GPU:1", 0.75),
    ]


@pytest.mark.slow
def test_a_traced_step_of_one_thread_runs_shows_both_towers_on_their_devices(
    cifar10_data_dir, tmp_path
):
    result = run_script(
        "cifar10_multi_gpu_train.py",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % tmp_path,
        "--num_gpus=2",
        "--cpu_towers",
        "--batch_size=4",
        "--max_steps=3",
        "--trace_step=2",
        # The session's thread flags, through a run.
        "--num_intra_threads=1",
        "--num_inter_threads=1",
    )

    path = tmp_path / "trace_step_2.json"
    assert "Trace of step 2: %s (open in chrome://tracing" % path in (
        result.stdout
    )
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("name") == "process_name"
    }
    # The tower each device's ops belong to, by name scope.
    towers_on = collections.defaultdict(set)
    for e in events:
        name = e.get("args", {}).get("name", "")
        if e.get("ph") == "X" and name.startswith("towers/tower_"):
            op_tower = name.split("/")[1]
            towers_on[lanes[e["pid"]].split()[0][-5:]].add(op_tower)
    # tower_1's gradients are averaged on /cpu:0, where its input is read.
    assert "tower_0" in towers_on["CPU:0"]
    assert towers_on["CPU:1"] == {"tower_1"}
    assert read_events(tmp_path).Tags()["run_metadata"] == ["step_2"]
    assert checkpoint_steps(tmp_path)[-1] == 3
