"""One loss-scale decision for the whole cluster of workers only.

Worker tasks as processes on 127.0.0.1; every process the test starts is
ended by the test, every wait is bounded.
"""

import pytest
from helpers.cluster import run_workers

from multigpu.graph import step_optimizer

WORKERS = 2
# The name of a moving average's shadow variable: NAME/SHADOW.
SHADOW = "ExponentialMovingAverage"
# The dynamic scale of the test, halved by the step it skips.
INITIAL_SCALE = 1024.0

# One worker of 2 CPU towers: argv is worker_hosts, task_index, the .npz to
# write. Worker 1's images overflow float32 in the first layer, so only its
# gradients are not finite; every worker runs one step of the trainer's
# graph with the dynamic loss scale and writes every variable and copy
# before and after it.
_WORKER = """
import sys
import numpy as np
import tensorflow as tf
import cifar10_multi_gpu_train
from multigpu.distributed import cluster
from multigpu.graph import placement, step_optimizer, towers, variable_update
from verification import sessions

hosts, index, output = sys.argv[1], int(sys.argv[2]), sys.argv[3]
task = cluster.cluster_task("", hosts, "worker", index)
devices = placement.tower_devices(2, cpu_towers=True)
config = cluster.task_config(
    placement.session_config(devices, operation_timeout_secs=120), task
)
server = tf.distribute.Server(task.cluster, "worker", index, config=config)
rng = np.random.RandomState(index)
size = 1e38 if index == 1 else 1.0

def get_next():
    images = rng.uniform(-1, 1, [2, 24, 24, 3]) * size
    labels = rng.randint(0, 10, [2])
    return tf.constant(images, tf.float32), tf.constant(labels, tf.int32)

with tf.Graph().as_default(), tf.compat.v1.device(cluster.device_setter(task)):
    update = variable_update.variable_update(
        "replicated", devices, workers=variable_update.Workers(task)
    )
    scaling = step_optimizer.LossScaling(float(sys.argv[4]), True, 1000)
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(get_next, 2),
        update=update, dtypes=step_optimizer.Dtypes(tf.float32, scaling),
        task=task,
    )
    # All but the averages of the worker's own losses.
    variables = [
        v for v in tf.compat.v1.global_variables()
        if not v.op.name.endswith("/avg")
    ] + [
        v for v in tf.compat.v1.local_variables()
        if towers.primary_name(v.op.name)
    ]
    with tf.compat.v1.Session(server.target, config=config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(sessions.local_init_op())
        before = sess.run(variables)
        sess.run(train_op)
        after = sess.run(variables)
names = [v.op.name for v in variables]
np.savez(
    output,
    **{"before/" + n: v for n, v in zip(names, before)},
    **{"after/" + n: v for n, v in zip(names, after)},
)
"""


def _one_step_each(tmp_path):
    """Runs the workers; returns one dict of their .npz per worker."""
    return run_workers(_WORKER, WORKERS, tmp_path, INITIAL_SCALE)


@pytest.mark.slow
def test_an_overflow_on_one_worker_skips_the_step_on_every_worker(tmp_path):
    chief, other = _one_step_each(tmp_path)

    counters = ("global_step", "loss_scale", step_optimizer.SKIPPED_STEPS)
    names = [n[len("after/") :] for n in chief if n.startswith("after/")]
    kept = [n for n in names if n.split("/")[-1] not in counters]
    assert len(kept) > 10, names
    for name in kept:
        # Byte-equal: unchanged by the step on every worker, and the same on
        # both but for the moving averages, which start from each worker's
        # own values (only the chief's are saved).
        for worker in (chief, other):
            assert worker["after/" + name].tobytes() == (
                worker["before/" + name].tobytes()
            ), name
        if not name.endswith("/" + SHADOW):
            assert other["after/" + name].tobytes() == (
                chief["after/" + name].tobytes()
            ), name
    for worker in (chief, other):
        assert worker["after/loss_scale"] == INITIAL_SCALE / 2
        assert worker["after/" + step_optimizer.SKIPPED_STEPS] == 1
        assert worker["after/global_step"] == 1
