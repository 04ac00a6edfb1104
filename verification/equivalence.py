"""Every combination of the towers' options trains the same numbers.

  python -m verification.equivalence            # the whole product
  python -m verification.equivalence --fast     # the slice the tests run
  python -m verification.equivalence --fast --models=my_model:small_net
  python -m verification.equivalence --all_reduces=collective_float16
  python -m verification.equivalence --fast --models=my_model:net \
      --updates=replicated --precisions=float32 --towers=2

Installed as `tf1-equivalence`, with the same flags.

Over variable update x all-reduce x model x precision x towers, each cell
trains STEPS steps from one start on the same examples through the
multi-GPU trainer's own `build_graph`, and compares every variable of the
model, its optimizer slots, its moving averages, the losses' averages and
the loss scale's variables with one device that trains on the whole
batch. The cells of update `workers_only` are a cluster of 2 worker
processes on 127.0.0.1, their gradients all-reduced across them
(verification/equivalence_workers.py); where those cross in 2 bytes a value,
the one device rounds them as the ring does
(verification/equivalence_transfer.py). `--models` takes the suite's models
and a user's MODULE:FUNCTION, as the trainers' --model does. On a machine
with GPUs the towers are the GPUs (NCCL joins the all-reduces); without,
virtual CPU devices.

The one device computes each tower's slice of the batch in turn in one
graph (the same ops on the same shapes as a tower), takes the mean of the
slices' losses plus every regularization term once, runs the last slice's
batch-norm updates (as the towers: the last tower's batch moves the
statistics), and applies the gradient with TensorFlow's own optimizer and
moving averages (of the variables found in the graph's collections: not
the suite's list, whose omission would cancel), with the towers' loss
scale on its whole loss (unscaled, float16's small gradients round to 0).

The tolerance is measured per cell and per variable: the one device
trained again from its start moved by one ulp of the compute dtype, with
other seeds (verification/equivalence_tolerance.py). A cell of
--clip_gradients clips the one device's mean gradient to its global norm.
Prints a progress line and a row per cell; exits 1 if a cell moved no
weight, is out of tolerance (a NaN or an infinity anywhere is), has a
copy that differs from its variable, is not provable (every weight's
tolerance half its move or more, or a step that draws random numbers),
or has measuring runs that never agreed (unless --allow_unsettled).
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import argparse
import contextlib
import sys
import time

import numpy as np
import tensorflow as tf

# cifar10_multi_gpu_train is the one script imported here (for its
# build_graph): two scripts' absl flags clash in one process.
import cifar10
import cifar10_multi_gpu_train
from multigpu.graph import placement, step_optimizer, variable_update
from verification import (
    equivalence_cells,
    equivalence_reference,
    equivalence_tolerance,
    equivalence_verdicts,
    equivalence_workers,
    sessions,
)
from verification.equivalence_table import (
    Result,
    print_header,
    print_row,
    print_summary,
)
from verification.equivalence_verdicts import Reference

STEPS = 3  # Steps of every cell: enough for momentum and the averages.
PER_TOWER_BATCH = 2  # Examples per tower per step.
IMAGE_SHAPE = [24, 24, 3]  # The CIFAR-10 trainer's crops.

# The name ExponentialMovingAverage gives a variable's moving average.
SHADOW = "/ExponentialMovingAverage"


def batches(case, seed=0):
    """float32 [STEPS, towers, B, 24, 24, 3] images, int32 [...] labels."""
    rng = np.random.default_rng(seed)
    shape = [STEPS, case.towers, PER_TOWER_BATCH]
    images = rng.normal(size=shape + IMAGE_SHAPE).astype(np.float32)
    labels = rng.integers(0, 10, size=shape).astype(np.int32)
    return images, labels


def steps_of(*arrays):
    """get_next() of one tf.data iterator over arrays' first dimension.

    The steps repeat: a start of `trainer` takes STEPS of them (arrays'
    first dimension), and the next start takes them again from the first.
    """
    dataset = tf.data.Dataset.from_tensor_slices(arrays).repeat()
    return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next


def one_device_graph(case, images, labels):
    """The reference step on one device; returns its train op."""
    compute_dtype, scaling = equivalence_cells.PRECISIONS[case.precision]
    model = equivalence_cells.model_of(case.model)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    whole = [STEPS, case.towers * PER_TOWER_BATCH]
    batch_images, batch_labels = steps_of(
        images.reshape(whole + IMAGE_SHAPE), labels.reshape(whole)
    )()
    before = tf.compat.v1.global_variables()
    slices = equivalence_reference.slices(
        model, compute_dtype, batch_images, batch_labels, case
    )
    slice_losses, cross_entropy, regularization, scope = slices
    averaged = equivalence_reference.model_variables(before)
    averages_op = equivalence_reference.loss_averages(
        {"cross_entropy": cross_entropy},
        slice_losses[-1] + regularization,
        scope,
    )
    opt = model.optimizer(model.learning_rate(global_step, whole[1]))
    scale = scaling.initial_scale if scaling else 1.0
    grads = equivalence_reference.mean_gradient(
        opt, case, slice_losses, regularization, scale
    )
    if case.clip_norm:
        # The whole batch's mean gradient, clipped to its global norm.
        clipped, _ = tf.clip_by_global_norm(
            [grad for grad, _ in grads], case.clip_norm
        )
        grads = [(grad, var) for grad, (_, var) in zip(clipped, grads)]
    # The losses' averages read this step's losses, before the update.
    with tf.control_dependencies([averages_op]):
        apply_op = opt.apply_gradients(grads, global_step=global_step)
    statistics = tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.UPDATE_OPS, scope
    )
    with tf.control_dependencies(
        [
            apply_op,
            *statistics,
            *equivalence_reference.loss_scale_state(scaling),
        ]
    ):
        return tf.compat.v1.train.ExponentialMovingAverage(
            cifar10.MOVING_AVERAGE_DECAY, num_updates=global_step
        ).apply(averaged)


def tower_graph(case, images, labels, devices):
    """The trainer's step on the towers; returns its train op."""
    compute_dtype, scaling = equivalence_cells.PRECISIONS[case.precision]
    update = variable_update.variable_update(
        case.update,
        devices,
        variable_device_choice="cpu",
        all_reduce_spec=case.all_reduce or "auto",
    )
    per_tower = iter(
        [steps_of(images[:, i], labels[:, i]) for i in range(case.towers)]
    )
    _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
        inputs=cifar10_multi_gpu_train.TowerInput(
            lambda: next(per_tower)(), PER_TOWER_BATCH
        ),
        update=update,
        dtypes=step_optimizer.Dtypes(compute_dtype, scaling),
        model=equivalence_cells.model_of(case.model),
        options=cifar10_multi_gpu_train.StepOptions(case.clip_norm),
    )
    return train_op


def initial_values(case, seed=0):
    """The model's variables as one device draws them: name -> array."""
    images, labels = batches(case._replace(towers=1))
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(seed)
        one_device_graph(case._replace(towers=1), images, labels)
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            # The variables the one device averages: the model's own, in
            # one run (a run per variable prunes the whole graph each time).
            return sess.run(
                {
                    name: var
                    for name, var in variables.items()
                    if name + SHADOW in variables
                }
            )


def train(graph_fn, initial, devices):
    """Builds graph_fn() in a new graph and runs STEPS steps of it.

    Returns:
      values: dict name -> array of every global variable after the steps.
      copy_gaps: list (one per step) of the largest |copy - variable|.
    """
    with trainer(graph_fn, devices) as train_from:
        return train_from(initial)


@contextlib.contextmanager
def trainer(graph_fn, devices):
    """graph_fn() built once, in a new graph and session, for many starts.

    Yields:
      train_from: a function of a start (name -> array, as
        `initial_values`) that runs STEPS steps from it and returns
        `train`'s values and copy_gaps. Each call starts over: every
        global and local variable initialised again (the optimizer's
        slots, the global step, the loss scale's state), the start fed
        into the model's variables and their moving averages, the input
        at its first step (`steps_of`). It adds no op to the graph, which
        is finalized.
    """
    with tf.Graph().as_default() as graph:
        train_op = graph_fn()
        graph_variables = {
            var.op.name: var for var in tf.compat.v1.global_variables()
        }
        init_op = tf.compat.v1.global_variables_initializer()
        loads = assigners(graph_variables)
        local_init_op = sessions.local_init_op()
        graph.finalize()
        config = placement.session_config(devices)
        with tf.compat.v1.Session(config=config) as sess:

            def train_from(initial):
                sess.run(init_op)
                load_start(sess, loads, initial)
                sess.run(local_init_op)
                copy_gaps = []
                for _ in range(STEPS):
                    sess.run(train_op)
                    copy_gaps.append(
                        sessions.largest_copy_gap(sess, graph_variables)
                    )
                return sess.run(graph_variables), copy_gaps

            yield train_from


def assigners(graph_variables):
    """Per variable's name: a placeholder of its dtype and shape, and the
    op that assigns the placeholder's value to the variable."""
    loads = {}
    for name, var in graph_variables.items():
        value = tf.compat.v1.placeholder(var.dtype.base_dtype, var.shape)
        loads[name] = (value, var.assign(value))
    return loads


def load_start(sess, loads, initial):
    """Sets each variable named in initial, and its moving average (which
    starts at its variable's value), to initial's array (`assigners`)."""
    starts = [
        (loads[name], initial[name.replace(SHADOW, "")])
        for name in loads
        if name.replace(SHADOW, "") in initial
    ]
    sess.run(
        [assign for (_, assign), _ in starts],
        {value: start for (value, _), start in starts},
    )


def run_cell(case, initial=None, reference=None):
    """Trains one cell, the one device and the one device moved by an ulp.

    Args:
      case: the `Case`.
      initial: the model's starting values (`initial_values`), or None to
        draw them (TF1 layers draw other values in each new graph).
      reference: the cell's `Reference` from these initial values, if
        already trained for the cell's model, precision, towers and clip
        norm (it does not depend on the update).

    Returns:
      result: the cell's `Result`.
      reference: its `Reference`.
    """
    start = time.time()
    images, labels = batches(case)
    if initial is None:
        initial = initial_values(case)
    devices = placement.tower_devices(case.towers, cpu_towers=True)
    if reference is None:
        reference = measured_reference(case, initial, images, labels, devices)
    try:
        _say("the towers")
        values, copy_gaps = train_towers(case, images, labels, initial, devices)
        worst, name, extremes = equivalence_verdicts.worst(
            case, values, reference
        )
    except equivalence_workers.WorkerFailed as e:
        copy_gaps, worst, name = [0.0], float("inf"), str(e)
        extremes = (0.0, 0.0)
    moved = any(
        np.any(reference.values[name] != initial[name])
        for name in reference.weights
    )
    hidden = equivalence_tolerance.hidden_move(
        {name: initial[name] for name in reference.weights},
        reference.values,
        reference.spread,
    )
    seconds = time.time() - start
    result = Result(
        case,
        worst,
        name,
        max(copy_gaps),
        seconds,
        moved,
        reference.runs,
        reference.settled,
        extremes,
        hidden,
        reference.random_op,
    )
    return result, reference


def train_towers(case, images, labels, initial, devices):
    """The cell's towers trained: in this process, or in worker processes.

    Returns:
      `train`'s values and copy_gaps.

    Raises:
      equivalence_workers.WorkerFailed: a worker process failed.
    """
    if case.update == equivalence_workers.UPDATE:
        return equivalence_workers.train(case, images, labels, initial)
    return train(
        lambda: tower_graph(case, images, labels, devices), initial, devices
    )


def measured_reference(case, initial, images, labels, devices):
    """The one device trained from initial, and from initial moved an ulp.

    Each measuring run moves the start with another seed; runs are added
    until every variable has two that agree (`equivalence_tolerance.
    tolerance`), at most equivalence_tolerance.MAX_RUNS. All run in one
    graph and session (`trainer`): building it is most of a run's time
    (the ResNet's).
    """
    compute_dtype, _ = equivalence_cells.PRECISIONS[case.precision]
    weights, random = [], [None]

    def graph():
        train_op = one_device_graph(case, images, labels)
        weights[:] = [v.op.name for v in tf.compat.v1.trainable_variables()]
        random[:] = [equivalence_reference.random_op(train_op)]
        return train_op

    _say("the one device")
    with trainer(graph, devices) as train_from:
        values, _ = train_from(initial)
        runs, settled = [], False
        # One run shows how far a step's random draws land, which no
        # tolerance holds; a diverged one device fails whatever runs say.
        diverged = equivalence_tolerance.not_finite(values)
        limit = 1 if random[0] or diverged else equivalence_tolerance.MAX_RUNS
        while not settled and len(runs) < limit:
            moved = equivalence_tolerance.moved_by_one_ulp(
                initial, compute_dtype.as_numpy_dtype, seed=len(runs) + 1
            )
            _say("measuring run %d" % (len(runs) + 1))
            measuring, _ = train_from(moved)
            runs.append(equivalence_tolerance.spreads(values, measuring))
            spread, settled = equivalence_tolerance.tolerance(runs)
    extremes = equivalence_tolerance.extremes(runs)
    return Reference(
        values, spread, weights, len(runs), settled, extremes, random[0]
    )


def main():
    parser = _parser()
    args = parser.parse_args()
    try:
        cells = equivalence_cells.picked(
            bool(tf.config.list_physical_devices("GPU")),
            args.fast,
            _listed(args.models),
            _listed(args.all_reduces),
            [
                (flag, column, _listed(getattr(args, flag)))
                for flag, column, _ in _COLUMNS
            ],
        )
    except ValueError as e:
        parser.error(str(e))
    print_header(STEPS, PER_TOWER_BATCH, equivalence_tolerance.MULTIPLE)
    return print_summary(run_cells(cells), args.allow_unsettled)


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--fast", action="store_true", help="only the slice the tests run"
    )
    parser.add_argument(
        "--models",
        help="the models, comma-separated: %s or a MODULE:FUNCTION of "
        "yours, as --model takes it (default: all of those; with --fast, "
        "the slice's cells with these models)"
        % ", ".join(equivalence_cells.MODELS),
    )
    parser.add_argument(
        "--allow_unsettled",
        action="store_true",
        help="exit 0 even if a cell's measuring runs never agreed (its "
        "row says UNSETTLED), as long as every cell is within tolerance",
    )
    parser.add_argument(
        "--all_reduces",
        help="only the cells whose all_reduce column is one of these, "
        "comma-separated: %s, with nccl on GPUs (default: every cell, "
        "parameter_server's too)"
        % ", ".join(equivalence_cells.all_reduce_names(False)),
    )
    for flag, column, names in _COLUMNS:
        parser.add_argument(
            "--" + flag,
            help="only the cells whose %s column is one of these, "
            "comma-separated: %s (default: every one)" % (column, names),
        )
    return parser


def _listed(flag):
    """A comma-separated flag's values: None if not given."""
    return flag.split(",") if flag else None


# The flags that keep the cells of some values of a column, the column,
# and the values the product has.
_COLUMNS = [
    (flag, column, ", ".join(map(equivalence_cells.written, values)))
    for flag, column, values in [
        (
            "updates",
            "update",
            dict.fromkeys(
                [update for update, _ in equivalence_cells.updates(False)]
                + [equivalence_workers.UPDATE]
            ),
        ),
        ("precisions", "precision", equivalence_cells.PRECISIONS),
        ("towers", "towers", equivalence_cells.TOWER_COUNTS),
    ]
]


def _say(stage):
    """A stage of the cell under way, on its progress line."""
    print(" %s..." % stage, end="", flush=True)


def run_cells(cells):
    """Trains each cell and prints its row; returns their `Result`s.

    A model's cells start from one draw of its variables, and cells that
    differ only in their update share the one device's `Reference`.
    """
    starts, references, results = {}, {}, []
    for number, case in enumerate(cells, 1):
        # A progress line: the cell, then each stage as it starts.
        cell = " ".join(map(str, case))
        print("cell %d/%d (%s):" % (number, len(cells), cell), end="")
        if case.model not in starts:
            _say("the model's start")
            starts[case.model] = initial_values(case)
        # The one device's run depends on all but the update and the
        # all-reduce, but for the dtype the gradients cross the workers in.
        key = case._replace(update=None, all_reduce=None)
        key += (equivalence_workers.transfer_dtype(case),)
        result, references[key] = run_cell(
            case, starts[case.model], references.get(key)
        )
        print(" done", flush=True)
        print_row(result)
        results.append(result)
    return results


if __name__ == "__main__":
    sys.exit(main())
