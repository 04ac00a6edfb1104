"""One worker task of the equivalence runner's cells across workers.

  python -m verification.equivalence_worker HOSTS INDEX INPUTS OUTPUT

Started by verification/equivalence_workers.py, one process per worker of a
cluster of workers only on 127.0.0.1 (HOSTS, comma-separated HOST:PORT;
INDEX, this worker's task). INPUTS is the .npz of the cell: 'case' (the
`equivalence_table.Case`, as JSON), 'images' float32 [STEPS, towers, B, 24, 24,
3] and 'labels' int32 [STEPS, towers, B] of all the cluster's towers, and
the model's initial values (name -> array). The worker builds the
trainer's step (`cifar10_multi_gpu_train.build_graph`, replicated, its
gradients all-reduced across the workers by collective ops) on its share
of the towers, agrees with the other worker on the cell
(`agreement.agree`, as the trainer does), starts from the initial values
on the chief and from the chief's on the other, trains STEPS steps on its
towers' slices of every batch and writes OUTPUT, an .npz of every global
variable after the steps (name -> array) and 'gaps' (per step, the largest
|copy - variable| of its towers). A bad cell or a disagreement is one line
on stderr, exit 1.
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import json
import sys

import numpy as np
import tensorflow as tf

import cifar10_multi_gpu_train
from multigpu import errors
from multigpu.distributed import agreement, cluster
from multigpu.graph import placement, step_optimizer, variable_update
from verification import (
    equivalence,
    equivalence_cells,
    equivalence_table,
    equivalence_workers,
    sessions,
)

# Seconds a worker waits for its peer (start-up, the agreement, any op): a
# bound for a loaded machine, not an expected time.
TIMEOUT_SECS = 300


def build(case, task, images, labels, devices):
    """This worker's share of the cell's step; returns its train op.

    Args:
      case: the `equivalence_table.Case`; case.towers counts every worker's.
      task: the worker's `cluster.ClusterTask`, workers_only.
      images, labels: the cell's batches, as INPUTS holds them.
      devices: this worker's tower device strings.
    """
    compute_dtype, scaling = equivalence_cells.PRECISIONS[case.precision]
    first = task.task_index * len(devices)
    per_tower = iter(
        [
            equivalence.steps_of(images[:, i], labels[:, i])
            for i in range(first, first + len(devices))
        ]
    )
    update = variable_update.variable_update(
        "replicated",
        devices,
        all_reduce_spec="collective",
        workers=variable_update.Workers(
            task, transfer_dtype=equivalence_workers.transfer_dtype(case)
        ),
    )
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            lambda: next(per_tower)(), equivalence.PER_TOWER_BATCH
        ),
        update=update,
        dtypes=step_optimizer.Dtypes(compute_dtype, scaling),
        model=equivalence_cells.model_of(case.model),
        task=task,
        options=cifar10_multi_gpu_train.StepOptions(case.clip_norm),
    )
    return train_op


def train(server, config, task, train_op, initial):
    """Runs STEPS steps; the chief starts from initial, the other from it.

    Returns:
      values: dict name -> array, every global variable after the steps.
      gaps: list of float, per step the largest |copy - variable|.
    """
    graph_variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    # Built on every worker, so that their graphs stay alike.
    loads = equivalence.assigners(graph_variables)
    with tf.compat.v1.Session(server.target, config=config) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        if task.is_chief:
            # In one run, not one per variable (each prunes the graph).
            equivalence.load_start(sess, loads, initial)
        # The other worker takes the chief's values here.
        sess.run(sessions.local_init_op())
        gaps = []
        for _ in range(equivalence.STEPS):
            sess.run(train_op)
            gaps.append(sessions.largest_copy_gap(sess, graph_variables))
        return sess.run(graph_variables), gaps


def main(hosts, index, inputs, output):
    data = dict(np.load(inputs))
    case = equivalence_table.Case(*json.loads(str(data.pop("case"))))
    images, labels = data.pop("images"), data.pop("labels")
    task = cluster.cluster_task("", hosts, "worker", int(index))
    devices = placement.tower_devices(
        case.towers // task.num_workers, cpu_towers=True
    )
    config = cluster.task_config(
        placement.session_config(devices, operation_timeout_secs=TIMEOUT_SECS),
        task,
    )
    server = tf.distribute.Server(
        task.cluster, "worker", task.task_index, config=config
    )
    with (
        tf.Graph().as_default(),
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        train_op = build(case, task, images, labels, devices)
        # Named as the trainer's flags: what changes the numbers.
        settings = {
            "model": case.model,
            "use_fp16": case.precision,
            "num_gpus": len(devices),
            "all_reduce_spec": case.all_reduce,
            "batch_size": equivalence.PER_TOWER_BATCH,
            "max_steps": equivalence.STEPS,
            agreement.VARIABLES: agreement.variables_digest(
                tf.compat.v1.global_variables()
            ),
        }
        agreement.agree(server.target, task, settings, TIMEOUT_SECS)
        values, gaps = train(server, config, task, train_op, data)
    np.savez(output, gaps=gaps, **values)


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except (ValueError, errors.TrainingError) as e:
        sys.exit("verification.equivalence_worker: error: %s" % e)
