"""A cluster of workers only: replicated variables, all-reduced gradients.

Worker tasks as processes on 127.0.0.1; every process a test starts is ended
by the test, every wait is bounded.
"""

import os
import re
import signal

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_steps, run_script
from helpers.cluster import (
    FAULT_EXIT_BOUND_SECS,
    FAULT_TIMEOUT_SECS,
    free_ports,
    run_workers,
    wait_for_step,
)
from helpers.model_sizes import CIFAR10_PARAMETERS

from multigpu.distributed import cluster, kinds
from multigpu.graph import all_reduce, collectives, placement
from verification import equivalence, equivalence_table

SCRIPT = "cifar10_multi_gpu_train.py"
WORKERS, TOWERS = 2, 2
STEPS = 20
# The equivalence runner's cell of the cluster: the tutorial's model on 2 x 2
# towers, replicated, all-reduced by collective ops.
CASE = equivalence_table.Case(
    "replicated", "collective", "tutorial", "float32", WORKERS * TOWERS
)
# Bytes per all-reduce of the cluster run: the 4.27 MB of the tutorial's
# gradients travel in 5 pieces, so that the packing is on the tested path.
TEST_PACK_BYTES = 2**20

# One worker of the numeric test: argv is worker_hosts, task_index, the
# .npz of the batches and the initial values, the .npz to write. Trains a
# step per batch on its towers' share of every batch, as the trainer
# builds the step, in a plain session on its own server; the chief starts
# from the initial values, the other worker from the chief's.
_WORKER = """
import sys
import numpy as np
import tensorflow as tf
import cifar10_multi_gpu_train
from verification import equivalence
from multigpu.distributed import cluster
from multigpu.graph import placement, step_optimizer, variable_update
from multigpu.graph import towers as copy_names
from verification import sessions

hosts, index, output, inputs = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5]
data = dict(np.load(inputs))
task = cluster.cluster_task("", hosts, "worker", index)
images, labels = data.pop("images"), data.pop("labels")
towers = images.shape[1] // task.num_workers
devices = placement.tower_devices(towers, cpu_towers=True)
config = cluster.task_config(
    placement.session_config(devices, operation_timeout_secs=120), task
)
server = tf.distribute.Server(task.cluster, "worker", index, config=config)
batches = iter(
    tf.compat.v1.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensor_slices((images[:, i], labels[:, i]))
    ).get_next
    for i in range(index * towers, (index + 1) * towers)
)
with tf.Graph().as_default(), tf.compat.v1.device(cluster.device_setter(task)):
    update = variable_update.variable_update(
        "replicated", devices,
        workers=variable_update.Workers(task, int(data.pop("pack"))),
    )
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            lambda: next(batches)(), equivalence.PER_TOWER_BATCH
        ),
        update=update, dtypes=step_optimizer.Dtypes(tf.float32, None),
        task=task,
    )
    # All but the averages of the worker's own losses, for its summaries.
    graph_variables = {
        v.op.name: v for v in tf.compat.v1.global_variables()
        if not v.op.name.endswith("/avg")
    }
    # The weights, slots, statistics, global step and every copy: what the
    # chief's values reach at the start. The moving averages are made after
    # the update, each worker's from its own start (only the chief's saved).
    everything = [
        v for name, v in graph_variables.items()
        if equivalence.SHADOW not in name
    ] + [
        v for v in tf.compat.v1.local_variables()
        if copy_names.primary_name(v.op.name)
    ]
    with tf.compat.v1.Session(server.target, config=config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for name, var in graph_variables.items():
            value = data.get(name.replace(equivalence.SHADOW, ""))
            if task.is_chief and value is not None:
                var.load(value, sess)
        sess.run(sessions.local_init_op())
        gaps, states = [], []
        for step in range(len(images)):
            sess.run(train_op)
            if step == 0:
                first = sess.run(graph_variables)
            gaps.append(sessions.largest_copy_gap(sess, graph_variables))
            states.append(np.concatenate(
                [np.ravel(v).astype(np.float64) for v in sess.run(everything)]))
        values = sess.run(graph_variables)
first = {"first/" + name: value for name, value in first.items()}
np.savez(output, gaps=gaps, states=states, **values, **first)
"""


def _cluster_train(tmp_path, images, labels, initial, pack_bytes):
    """Trains WORKERS workers of TOWERS towers on the batches.

    Returns:
      A list (one per worker) of dicts: the global variables after the
      steps, after the first step ('first/NAME'), and 'gaps' (per step, the
      largest gap between a copy and its variable) and 'states' (per step,
      every variable and copy of the worker but the moving averages).
    """
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, images=images, labels=labels, pack=pack_bytes, **initial)
    return run_workers(_WORKER, WORKERS, tmp_path, inputs)


# The ring's order of summation is not the one device's: after one step
# they agree to 1e-8, but over 20 steps a max-pool whose two largest inputs
# lie closer than that picks the other one now and then, which moves a
# weight by up to 2e-3 (measured). So the cluster is held to one device for
# one step, and to the ring of 4 towers in one process, which sums in its
# order, for 20 steps (measured: 2.2e-8 apart with packing, which chunks
# the ring otherwise; packing itself is checked below).
@pytest.mark.slow
def test_two_workers_of_two_towers_train_as_four_towers_and_one_device(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(equivalence, "STEPS", STEPS)
    images, labels = equivalence.batches(CASE)
    initial = equivalence.initial_values(CASE)
    devices = placement.tower_devices(WORKERS * TOWERS, cpu_towers=True)

    chief, other = _cluster_train(
        tmp_path, images, labels, initial, TEST_PACK_BYTES
    )
    four_towers, _ = equivalence.train(
        lambda: equivalence.tower_graph(CASE, images, labels, devices),
        initial,
        devices,
    )
    monkeypatch.setattr(equivalence, "STEPS", 1)
    one_device, _ = equivalence.train(
        lambda: equivalence.one_device_graph(CASE, images[:1], labels[:1]),
        initial,
        ["/cpu:0"],
    )

    # The copies on every tower of every worker, after every step: equal.
    assert list(chief["gaps"]) == [0.0] * STEPS
    assert list(other["gaps"]) == [0.0] * STEPS
    np.testing.assert_array_equal(chief["states"], other["states"])
    # The weights, their averages and the step (the one device's losses'
    # averages follow its last slice, not the chief's last tower).
    compared = {"global_step"} | set(initial)
    compared |= {name + equivalence.SHADOW for name in initial}
    for name in sorted(compared):
        np.testing.assert_allclose(
            chief["first/" + name],
            one_device[name],
            rtol=0,
            atol=1e-7,
            err_msg=name,
        )
        np.testing.assert_allclose(
            chief[name], four_towers[name], rtol=0, atol=1e-6, err_msg=name
        )
    # The steps moved the weights: the checks are not vacuous.
    for name, value in initial.items():
        assert np.max(np.abs(chief[name] - value)) > 1e-4, name
        assert np.max(np.abs(one_device[name] - value)) > 1e-5, name


def _reduced(grads_of_towers, pack_bytes, transfer_dtype=tf.float32):
    """collectives.all_reduce_mean of one worker's towers on /cpu:0, /cpu:1.

    Returns:
      A list (one per tower) of lists of arrays (None for None).
    """
    devices = ["/cpu:0", "/cpu:1"]
    with tf.Graph().as_default():
        tower_grads = []
        for device, grads in zip(devices, grads_of_towers):
            with tf.device(device):
                tower_grads.append(
                    [
                        (None if g is None else tf.constant(g), None)
                        for g in grads
                    ]
                )
        reduced = collectives.all_reduce_mean(
            tower_grads,
            devices,
            1,
            all_reduce.CollectiveKeys(),
            pack_bytes,
            transfer_dtype,
        )
        fetches = [[g for g, _ in grads if g is not None] for grads in reduced]
        with tf.compat.v1.Session(
            config=placement.session_config(devices)
        ) as sess:
            values = iter(sess.run(fetches))
    reduced = []
    for grads in grads_of_towers:
        tower_values = iter(next(values))
        reduced.append(
            [None if g is None else next(tower_values) for g in grads]
        )
    return reduced


def test_packed_gradients_are_all_reduced_to_the_exact_mean():
    rng = np.random.default_rng(0)
    shapes = [[3, 5], [7], [], [4, 2, 2]]
    towers = [
        [rng.normal(size=s).astype(np.float32) for s in shapes]
        + [None, rng.normal(size=[6])]  # a float64 gradient
        for _ in range(2)
    ]
    # 2 towers: a + b is exact in any order, so every packing gives the
    # mean exactly.
    expected = [
        None if a is None else (a + b) / a.dtype.type(2)
        for a, b in zip(*towers)
    ]
    for pack_bytes in (0, 40, 2**20):
        for tower in _reduced(towers, pack_bytes):
            for value, mean in zip(tower, expected):
                if mean is None:
                    assert value is None
                    continue
                assert value.dtype == mean.dtype
                np.testing.assert_array_equal(value, mean)


def test_float32_gradients_cross_as_float16_and_come_back_as_float32():
    rng = np.random.default_rng(0)
    towers = [
        [rng.normal(size=[3, 5]).astype(np.float32), rng.normal(size=[6])]
        for _ in range(2)
    ]
    # The ring sums float16 values in float16 and divides by 2 there.
    half = [
        ((a.astype(np.float16) + b.astype(np.float16)) / np.float16(2))
        for a, b in zip(*towers)
    ]
    for pack_bytes in (0, 2**20):
        for tower in _reduced(towers, pack_bytes, tf.float16):
            assert tower[0].dtype == np.float32
            np.testing.assert_array_equal(tower[0], half[0].astype(np.float32))
            # A float64 gradient crosses as it is.
            np.testing.assert_array_equal(
                tower[1], (towers[0][1] + towers[1][1]) / 2
            )
    assert not np.array_equal(
        half[0].astype(np.float32), (towers[0][0] + towers[1][0]) / 2
    )


def test_float32_gradients_cross_as_bfloat16_when_asked():
    bfloat16 = tf.bfloat16.as_numpy_dtype
    rng = np.random.default_rng(1)
    towers = [[rng.normal(size=[3, 5]).astype(np.float32)] for _ in range(2)]
    # The ring sums bfloat16 values in bfloat16 and divides by 2 there.
    (a,), (b,) = towers
    half = (a.astype(bfloat16) + b.astype(bfloat16)) / bfloat16(2)

    (reduced,), _ = _reduced(towers, 0, tf.bfloat16)

    assert reduced.dtype == np.float32
    np.testing.assert_array_equal(reduced, half.astype(np.float32))
    assert not np.array_equal(reduced, (a + b) / 2)


def test_the_pack_plan_splits_each_dtype_into_pieces_of_pack_bytes():
    grads = [
        tf.zeros([3, 5]),  # 60 bytes
        None,
        tf.zeros([7], tf.float64),  # 56 bytes
        tf.zeros([25]),  # 100 bytes
    ]
    assert collectives.pack_plan(grads, 0) == [
        collectives.Pack(tf.float32, [0], [15], [[3, 5]], [15]),
        collectives.Pack(tf.float64, [2], [7], [[7]], [7]),
        collectives.Pack(tf.float32, [3], [25], [[25]], [25]),
    ]
    # 160 float32 bytes in pieces of about 64: 3 pieces of 14, 13, 13.
    assert collectives.pack_plan(grads, 64) == [
        collectives.Pack(
            tf.float32, [0, 3], [15, 25], [[3, 5], [25]], [14, 13, 13]
        ),
        collectives.Pack(tf.float64, [2], [7], [[7]], [7]),
    ]


def _workers_cluster(make_cluster, *flags):
    """A cluster of WORKERS workers only, replicated, TOWERS CPU towers."""
    return make_cluster(
        WORKERS,
        "--variable_update=replicated",
        "--num_gpus=%d" % TOWERS,
        "--batch_size=4",
        *flags,
        num_ps=0,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, found",
    [
        (signal.SIGKILL, "unreachable: worker task 1 (%s)"),
        (
            signal.SIGSTOP,
            "not responding (stopped or stuck): worker task 1 (%s)",
        ),
    ],
    ids=["killed", "frozen"],
)
def test_a_killed_or_frozen_worker_ends_the_other_naming_it(
    make_cluster,
    fault,
    found,
):
    cluster = _workers_cluster(
        make_cluster,
        "--max_steps=100000",
        "--operation_timeout_secs=%d" % FAULT_TIMEOUT_SECS,
    )
    cluster.start("worker", 0)
    cluster.start("worker", 1)
    wait_for_step(cluster, "worker0", 5)
    os.kill(cluster.processes["worker1"].pid, fault)

    code, seconds = cluster.wait("worker0")
    lines = cluster.log("worker0").strip().split("\n")
    assert code == 1, lines[-20:]
    assert seconds < FAULT_EXIT_BOUND_SECS
    saved = re.fullmatch(
        re.escape(SCRIPT + ": error: lost the cluster after ")
        + r"\d+ local steps \(\w+Error\): "
        + re.escape(found % cluster.worker_addresses[1])
        + r"; saved (\S+-(\d+)); run the same commands on every worker to "
        "resume from it",
        lines[-1],
    )
    assert saved, lines[-1]
    # The chief saved the last step it completed: at least the one it logged.
    assert checkpoint_steps(cluster.train_dir(0))[-1] == int(saved[2]) >= 5
    if fault == signal.SIGSTOP:
        # Woken, the frozen worker finds its peer gone and ends by itself.
        os.kill(cluster.processes["worker1"].pid, signal.SIGCONT)
        code, _ = cluster.wait("worker1")
        assert code == 1


@pytest.mark.slow
def test_the_dry_run_prices_the_bytes_of_each_worker_over_the_network():
    gradient_bytes = CIFAR10_PARAMETERS * 4
    # A ring of 4 devices: each sends 2 x 3/4 of the gradients, and one of
    # a worker's 2 ring links leaves its machine.
    ring = 2 * 3 * gradient_bytes // 4
    hosts = ",".join("127.0.0.1:%d" % p for p in free_ports(WORKERS))

    result = run_script(
        SCRIPT,
        "--dry_run",
        "--num_gpus=%d" % TOWERS,
        "--batch_size=8",
        "--worker_hosts=%s" % hosts,
        "--job_name=worker",
        "--variable_update=replicated",
    )

    plan = result.stdout
    assert (
        "  replicated (ring of 4 devices): network out {0:,} + in {0:,}; "
        "inside the machine {0:,} each way;\n"
        "    over the network: {1:.2f} ms at 10 Gb/s, {2:.2f} ms at 25 Gb/s,"
        " {3:.2f} ms at 100 Gb/s\n".format(
            ring, ring * 8e-7, ring * 8e-7 / 2.5, ring * 8e-8
        )
    ) in plan
    # Each of 2 towers reads every variable from the ps; one mean goes back.
    assert (
        "  parameter_server (ps cluster): network out {:,} + in {:,}; inside "
        "the machine {:,} each way;".format(
            gradient_bytes, 2 * gradient_bytes, 4 * gradient_bytes
        )
    ) in plan
    # 64 GPUs: a ring of 64, and 8 machines each with a ps of 1/8 of them.
    ring_64 = 2 * 63 * gradient_bytes // 64
    ps_64 = (9 * gradient_bytes) * 7 // 8
    row = re.search(r"\n +64 +8 \| ([\d./]+) \+ [\d.]+ \| ([\d./]+) \+", plan)
    assert row.groups() == (
        "/".join("%.2f" % (ring_64 * 8 / g / 1e6) for g in (10, 25, 100)),
        "/".join("%.2f" % (ps_64 * 8 / g / 1e6) for g in (10, 25, 100)),
    )


def test_a_ps_task_in_a_cluster_of_workers_only_is_refused():
    with pytest.raises(ValueError) as error:
        cluster.cluster_task("", "127.0.0.1:2223,127.0.0.1:2224", "ps", 0)
    assert str(error.value) == (
        "--job_name=ps but --ps_hosts is empty: a cluster of workers only "
        "has no ps task; start each task with --job_name=worker"
    )
    task = cluster.cluster_task(
        "", "127.0.0.1:2223,127.0.0.1:2224", "worker", 1
    )
    assert (task.kind, task.num_workers, task.replicas_per_step) == (
        kinds.WORKERS_ONLY,
        2,
        2,
    )
    assert cluster.device_setter(task) == "/job:worker/task:1"
    config = cluster.task_config(placement.session_config(), task)
    assert config.experimental.collective_group_leader == (
        "/job:worker/replica:0/task:0"
    )
    assert list(config.device_filters) == ["/job:worker/task:1"]
