"""With --sync_replicas the moving averages move once per global step.

A model with batch-norm statistics is refused with --sync_replicas.

A ps cluster of two sync workers resumes a one-process run whose moving
averages differ from its weights, with the gradients clipped to ~0 so that
the weights stay put: an average of weight w that was a before the run is
w + (a - w) * d_4 * d_5 after global steps 4 and 5 (d_t, the decay of
step t), and would be nearer w had each worker's step moved it too. The
quick test reads the same from a sync worker's graph: its step moves no
average, the update that counts a global step moves each once.
"""

import gc

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    SHADOW,
    checkpoint_steps,
    error_line,
    free_port,
    run_script,
    start_script,
    trainer_flags,
)
from helpers.towers import cifar10_step_graph

from multigpu.distributed import cluster

SCRIPT = "cifar10_multi_gpu_train.py"
# The tutorial's decay of the averages (cifar10.MOVING_AVERAGE_DECAY).
DECAY = 0.9999
# The one-process run's steps, then the cluster's.
FIRST_STEPS = 3
MAX_STEPS = 5
# A clipping norm that leaves every weight as it is in float32.
NO_UPDATE_CLIP = "--clip_gradients=1e-30"
# The weights whose averages are read.
WEIGHTS = ("conv1/weights", "local3/weights", "softmax_linear/biases")
# A generous bound on the cluster's start and its two steps.
CLUSTER_BOUND_SECS = 300
# The tutorial's trainable variables: 5 layers' weights and biases.
TUTORIAL_VARIABLES = 10


def _decay(step):
    """The decay of the averages at global step step (the num_updates
    rule of `ExponentialMovingAverage`)."""
    return min(DECAY, (1.0 + step) / (10.0 + step))


def _weights_and_averages(train_dir, step):
    reader = tf.train.load_checkpoint(str(train_dir / ("model.ckpt-%d" % step)))
    return {
        name: (
            reader.get_tensor(name),
            reader.get_tensor(name + SHADOW),
        )
        for name in WEIGHTS
    }


def _sync_cluster(tmp_path, train_dir, flags):
    """Runs a ps task and two sync workers to the end; their exit codes."""
    ps, worker0, worker1 = ("127.0.0.1:%d" % free_port() for _ in range(3))
    cluster = [
        "--ps_hosts=%s" % ps,
        "--worker_hosts=%s,%s" % (worker0, worker1),
        "--sync_replicas",
    ]
    tasks = [("ps", 0), ("worker", 1), ("worker", 0)]
    processes = [
        start_script(
            SCRIPT,
            *flags,
            *cluster,
            "--job_name=%s" % job,
            "--task_index=%d" % index,
            "--train_dir=%s" % (train_dir if index == 0 else tmp_path / job),
            log_path=tmp_path / ("%s%d.log" % (job, index)),
        )
        for job, index in tasks
    ]
    try:
        return [p.wait(timeout=CLUSTER_BOUND_SECS) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.mark.slow
def test_sync_workers_move_the_averages_once_per_global_step(
    tmp_path, cifar10_data_dir
):
    train_dir = tmp_path / "train"
    flags = trainer_flags(
        cifar10_data_dir, train_dir, "--num_gpus=1", "--cpu_towers"
    )
    run_script(SCRIPT, *flags, "--max_steps=%d" % FIRST_STEPS)
    before = _weights_and_averages(train_dir, FIRST_STEPS)

    codes = _sync_cluster(
        tmp_path,
        train_dir,
        [*flags, NO_UPDATE_CLIP, "--max_steps=%d" % MAX_STEPS],
    )

    assert codes == [0, 0, 0], (tmp_path / "worker0.log").read_text()[-3000:]
    assert checkpoint_steps(train_dir)[-1] == MAX_STEPS
    after = _weights_and_averages(train_dir, MAX_STEPS)
    kept = np.prod([_decay(t) for t in range(FIRST_STEPS + 1, MAX_STEPS + 1)])
    for name in WEIGHTS:
        weight, average = before[name]
        np.testing.assert_array_equal(after[name][0], weight, err_msg=name)
        # Where the average and the weight differ most, 1e-3 of that.
        tolerance = 1e-3 * np.abs(average - weight).max()
        assert tolerance > 0, name
        np.testing.assert_allclose(
            after[name][1],
            weight + (average - weight) * kept,
            rtol=0,
            atol=tolerance,
            err_msg=name,
        )


def _ancestors(op):
    """op and every op it waits for, by its inputs or control inputs."""
    found, todo = set(), [op]
    while todo:
        op = todo.pop()
        if op not in found:
            found.add(op)
            todo.extend(t.op for t in op.inputs)
            todo.extend(op.control_inputs)
    return found


def _written(ops, names):
    """The names among names of the variables that ops write, one per op."""
    return [
        op.inputs[0].op.name
        for op in ops
        if op.type.startswith("Assign") and op.inputs[0].op.name in names
    ]


def _sync_worker_writes():
    """Builds worker 1's graph of a ps cluster's 2 sync workers (no server
    is started) and reads which ops write the moving averages.

    Returns:
      shadows: set of str, the names of the moving averages' variables.
      moves: list of str, the variable each op that moves one writes.
      per_worker_step: set of str, the shadows and global_step written by
        the ops a worker's step runs.
      per_global_step: set of str, the shadows written by the ops that the
        global step's one increment waits for.
    """
    task = cluster.cluster_task(
        "127.0.0.1:1", "127.0.0.1:2,127.0.0.1:3", "worker", 1, True
    )
    images = np.zeros([2, 24, 24, 3], np.float32)
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        _, train_op, _ = cifar10_step_graph(
            images, np.zeros([2], np.int32), task=task
        )
        shadows = {
            v.op.name
            for v in tf.compat.v1.global_variables()
            # NAME/SHADOW, or NAME/SHADOW_1 for a second average of NAME.
            if SHADOW in v.op.name
        }
        initializers = {v.initializer for v in tf.compat.v1.global_variables()}
        ops = [op for op in graph.get_operations() if op not in initializers]
        (count,) = [op for op in ops if _written([op], {"global_step"})]
        return (
            shadows,
            _written(ops, shadows),
            set(_written(_ancestors(train_op), shadows | {"global_step"})),
            set(_written(_ancestors(count), shadows)),
        )


def test_sync_replicas_move_each_average_once_per_global_step_not_per_worker():
    shadows, moves, per_worker_step, per_global_step = _sync_worker_writes()
    # SyncReplicasOptimizer's ready_for_local_init_op, which only a session
    # runs, logs 'Object was never used' when it is collected: collect the
    # graph now, into this test's captured output, not after the summary.
    gc.collect()

    assert len(shadows) == TUTORIAL_VARIABLES
    assert sorted(moves) == sorted(shadows)
    assert per_worker_step == set()
    assert per_global_step == shadows


def test_the_sync_chief_applies_a_step_once_replicas_to_aggregate_arrived():
    # 3 workers, --replicas_to_aggregate=2: the chief's accumulator of each
    # weight gives its mean once 2 gradients came.
    task = cluster.cluster_task(
        "127.0.0.1:1",
        "127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
        "worker",
        0,
        True,
        2,
    )
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        cifar10_step_graph(
            np.zeros([2, 24, 24, 3], np.float32),
            np.zeros([2], np.int32),
            task=task,
        )
        required = [
            int(tf.get_static_value(op.inputs[1]))
            for op in graph.get_operations()
            if op.type == "ResourceAccumulatorTakeGradient"
        ]
    gc.collect()  # As above: the graph's 'never used' log, here.

    assert required == [2] * TUTORIAL_VARIABLES


# Slow: it builds ResNet-20's graph before it refuses it.
@pytest.mark.slow
def test_sync_replicas_with_a_batch_norm_model_is_refused_in_one_line(
    tmp_path, cifar10_data_dir
):
    line = error_line(
        SCRIPT,
        *trainer_flags(cifar10_data_dir, tmp_path / "train", "--cpu_towers"),
        "--model=resnet20",
        "--ps_hosts=127.0.0.1:%d" % free_port(),
        "--worker_hosts=127.0.0.1:%d" % free_port(),
        "--job_name=worker",
        "--sync_replicas",
    )
    assert line == (
        "%s: error: --sync_replicas: --model=resnet20 has batch-norm "
        "statistics, which every worker would commit from its own batch, "
        "several times per global step; drop --sync_replicas (or train it "
        "in a cluster of workers only: --variable_update=replicated, no "
        "--ps_hosts)" % SCRIPT
    )
