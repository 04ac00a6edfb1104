"""Workers of a cluster agree on their settings before step 1, or all end.

Worker tasks as processes on 127.0.0.1; every process a test starts is ended
by the test, every wait is bounded.
"""

import re
import time

import pytest
from helpers.cluster import FAULT_EXIT_BOUND_SECS

from multigpu.distributed import agreement

SCRIPT = "cifar10_multi_gpu_train.py"
# The start-up wait of the runs that must end by agreement: far above the
# seconds an agreement takes, so that a run ended by the wait fails the bound.
PATIENT_SECS = 150
# The start-up wait of the runs whose peer never comes.
IMPATIENT_SECS = 5


def test_a_differing_setting_is_named_with_every_tasks_value():
    line = agreement.difference(
        [
            {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
            {"batch_size": 4, "learning_rate": 0.01, "model": "tutorial"},
            {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
        ]
    )
    assert line == (
        "--learning_rate differs between the workers: worker task 0 has "
        "0.1, worker task 1 has 0.01, worker task 2 has 0.1; start every "
        "worker with the same --learning_rate (docs/cluster.md)"
    )


def test_equal_settings_agree():
    settings = {"clip_gradients": 0.0, agreement.VARIABLES: "2 variables"}
    assert agreement.difference([settings, dict(settings)]) is None


def test_settings_cross_the_cluster_as_codes_and_come_back_equal():
    settings = {"learning_rate_boundaries": ["32000", "48000"], "xla": True}
    codes = agreement.encode(settings)
    assert codes.shape == (agreement.SETTINGS_BYTES,)
    assert agreement.decode(codes) == settings


def _workers(make_cluster, timeout_secs):
    return make_cluster(
        2,
        "--variable_update=replicated",
        "--num_gpus=2",
        "--batch_size=4",
        "--learning_rate=0.1",
        "--max_steps=20",
        "--operation_timeout_secs=%d" % timeout_secs,
        num_ps=0,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "flag, found",
    [
        (
            "--learning_rate=0.01",
            "--learning_rate differs between the "
            "workers: worker task 0 has 0.1, worker task 1 has 0.01; start "
            "every worker with the same --learning_rate (docs/cluster.md)",
        ),
        (
            "--num_gpus=1",
            "--num_gpus differs between the workers: worker "
            "task 0 has 2, worker task 1 has 1; start every worker with the "
            "same --num_gpus (docs/cluster.md)",
        ),
        (
            "--model=resnet20",
            "--model differs between the workers: worker "
            'task 0 has "tutorial", worker task 1 has "resnet20"; start every '
            "worker with the same --model (docs/cluster.md)",
        ),
    ],
    ids=["learning_rate", "num_gpus", "model"],
)
def test_a_setting_that_differs_ends_every_worker_naming_it(
    make_cluster,
    flag,
    found,
):
    cluster = _workers(make_cluster, PATIENT_SECS)
    start = time.time()
    cluster.start("worker", 0)
    cluster.start("worker", 1, flag)
    for name in ("worker0", "worker1"):
        code, _ = cluster.wait(name)
        lines = cluster.log(name).strip().split("\n")
        assert code == 1, lines[-20:]
        assert lines[-1] == SCRIPT + ": error: " + found
        assert "Traceback" not in cluster.log(name)
    assert time.time() - start < PATIENT_SECS
    assert not cluster.train_dir(0).joinpath("checkpoint").exists()


# A user's model module, its activation left open: each worker imports
# its own copy of it under one name.
DIFFERING_MODULE = """
import tensorflow as tf


def net(images, is_training):
    x = tf.compat.v1.layers.conv2d(images, 4, 3, strides=4, name="conv")
    x = tf.reduce_mean(%s, [1, 2])
    return tf.compat.v1.layers.dense(x, 10, name="dense")
"""


@pytest.mark.slow
def test_a_model_module_with_other_ops_ends_every_worker_naming_them(
    make_cluster, tmp_path
):
    cluster = _workers(make_cluster, PATIENT_SECS)
    for index, activation in enumerate(["tf.nn.relu(x)", "tf.tanh(x) * 3"]):
        folder = tmp_path / ("machine%d" % index)
        folder.mkdir()
        (folder / "differing.py").write_text(DIFFERING_MODULE % activation)
        cluster.start(
            "worker",
            index,
            "--model=differing:net",
            env={"PYTHONPATH": str(folder)},
        )
    for name in ("worker0", "worker1"):
        code, _ = cluster.wait(name)
        lines = cluster.log(name).strip().split("\n")
        assert code == 1, lines[-20:]
        assert re.fullmatch(
            SCRIPT + r": error: the model's ops differ between the workers: "
            r'worker task 0 has "(\d+) ops, sha1 \w{12}", worker task 1 has '
            r'"(\d+) ops, sha1 \w{12}"; every worker must run the same '
            r"model code \(docs/cluster.md\)",
            lines[-1],
        ), lines[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "peer_flags",
    [None, ("--model=no_such_module:logits",)],
    ids=["never_started", "cannot_build"],
)
def test_a_worker_whose_peer_never_listens_ends_naming_it(
    make_cluster,
    peer_flags,
):
    cluster = _workers(make_cluster, IMPATIENT_SECS)
    if peer_flags is not None:
        cluster.start("worker", 0, *peer_flags)
    cluster.start("worker", 1)
    code, seconds = cluster.wait("worker1")
    lines = cluster.log("worker1").strip().split("\n")
    assert code == 1, lines[-20:]
    assert seconds < FAULT_EXIT_BOUND_SECS
    assert lines[-1] == (
        "%s: error: worker task 1: no answer from worker task 0 (%s) within "
        "%d s of start-up (--operation_timeout_secs); start every worker "
        "task with the same flags, or look in its output for why it ended"
        % (SCRIPT, cluster.worker_addresses[0], IMPATIENT_SECS)
    )
    # No screen of TensorFlow's retries of a peer that is not there.
    assert not [line for line in lines if "Retrying" in line]
    if peer_flags is not None:
        code, _ = cluster.wait("worker0")
        assert code == 1
