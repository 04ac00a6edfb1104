"""One model, whatever the mode: the towers train what one device trains.

Every test here goes through the one N-tower harness of the equivalence
runner (verification/equivalence.py): the multi-GPU trainer's own
`build_graph` on virtual CPU towers against one device on the whole batch.
"""

import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, SCRIPT_ENV

import cifar10_multi_gpu_train
from multigpu.graph import (
    any_model,
    gradient_reduction,
    placement,
    step_optimizer,
)
from verification import (
    equivalence,
    equivalence_cells,
    equivalence_models,
    equivalence_table,
    equivalence_tolerance,
    equivalence_workers,
    sessions,
)

Case = equivalence_table.Case
WORKERS = equivalence_workers.UPDATE


def _cell(case, *marks):
    return pytest.param(case, marks=marks, id="-".join(map(str, case)))


@pytest.mark.parametrize(
    "case",
    [
        # The cell across workers (two processes, a minute) runs on the
        # get_variable model in the fast slice of docs/replicated.md, which
        # tests/test_docs.py runs; on the tutorial's, in
        # tests/test_collective_cluster.py's two workers of two towers.
        _cell(case)
        for case in equivalence_cells.fast_slice()
        if case.update != WORKERS
    ]
    + [_cell(equivalence_cells.RESNET_CELL, pytest.mark.slow)],
)
def test_each_cell_of_the_fast_slice_trains_what_one_device_trains(case):
    initial = equivalence.initial_values(case)
    result, reference = equivalence.run_cell(case, initial)

    assert result.worst <= 1.0, result
    assert result.copy_gap == 0.0, result
    # The steps moved every weight: the comparison is not vacuous.
    for name, value in initial.items():
        if name in reference.values and "moving_" not in name:
            assert np.max(np.abs(reference.values[name] - value)) > 1e-4, name


def _train_towers(case, initial):
    """The towers' values after the steps, and the copies' gaps."""
    images, labels = equivalence.batches(case)
    devices = placement.tower_devices(case.towers, cpu_towers=True)
    return equivalence.train(
        lambda: equivalence.tower_graph(case, images, labels, devices),
        initial,
        devices,
    )


def test_one_graph_trains_each_start_as_a_new_graph_for_it_does_to_the_bit():
    # Batch norm, a dynamic loss scale, momentum, the moving averages and
    # the input: every state that each start must begin anew.
    case = Case("replicated", "collective", "layers", "float16 dynamic", 2)
    initial = equivalence.initial_values(case)
    moved = equivalence_tolerance.moved_by_one_ulp(initial, np.float16, seed=1)
    images, labels = equivalence.batches(case)
    devices = placement.tower_devices(case.towers, cpu_towers=True)

    def graph():
        return equivalence.one_device_graph(case, images, labels)

    with equivalence.trainer(graph, devices) as train_from:
        shared = [train_from(start) for start in (initial, moved, initial)]
    fresh = [
        equivalence.train(graph, start, devices) for start in (initial, moved)
    ]

    for (values, gaps), (expected, expected_gaps) in zip(
        shared, fresh + fresh[:1]
    ):
        assert values.keys() == expected.keys()
        for name, value in expected.items():
            np.testing.assert_array_equal(values[name], value, err_msg=name)
        assert gaps == expected_gaps
    # The moved start lands elsewhere: the starts are not one run.
    weights = shared[0][0]["model/conv/kernel"]
    assert np.any(shared[1][0]["model/conv/kernel"] != weights)


@pytest.mark.parametrize("num_towers", [2, 4])
@pytest.mark.parametrize(
    "update, spec", [("parameter_server", None), ("replicated", "collective")]
)
def test_get_variable_regularizers_and_constraints_reach_every_copy(
    update, spec, num_towers
):
    case = Case(update, spec, "get_variable", "float32", num_towers)
    initial = equivalence.initial_values(case)
    result, _ = equivalence.run_cell(case, initial)
    values, copy_gaps = _train_towers(case, initial)

    assert result.worst <= 1.0, result
    assert copy_gaps == [0.0] * equivalence.STEPS
    # The decay shrank the linear weights by about WEIGHT_DECAY * 0.1 = 5%
    # a step, and the constraint, which the drawn kernel exceeds, holds on
    # the variable (and so on every copy, equal to it).
    initial = equivalence.initial_values(case)
    shrink = np.sum(np.abs(values["model/linear/weights"])) / np.sum(
        np.abs(initial["model/linear/weights"])
    )
    assert 0.80 < shrink < 0.90, shrink
    assert (
        np.max(np.abs(initial["model/conv/kernel"]))
        > 2 * equivalence_models.CLIP
    )
    assert (
        np.max(np.abs(values["model/conv/kernel"])) <= equivalence_models.CLIP
    )


def test_loss_scaling_on_two_towers_equals_unscaled_to_the_bit(monkeypatch):
    # In float32 a power-of-two scale and its division are exact.
    monkeypatch.setitem(
        equivalence_cells.PRECISIONS,
        "float32 scaled",
        (tf.float32, step_optimizer.LossScaling(1024.0, True, 1000)),
    )
    case = Case("replicated", "collective", "layers", "float32", 2)

    initial = equivalence.initial_values(case)

    unscaled, _ = _train_towers(case, initial)
    scaled, _ = _train_towers(
        case._replace(precision="float32 scaled"), initial
    )

    for name, value in unscaled.items():
        if "loss_scale" not in name:
            np.testing.assert_array_equal(scaled[name], value, err_msg=name)


def _skipped_step(update, spec):
    """Values before and after a step whose float16 gradients overflow."""
    case = Case(update, spec, "layers", "float16 dynamic", 2)
    images, labels = equivalence.batches(case)
    devices = placement.tower_devices(2, cpu_towers=True)
    # 2^24 times the loss overflows float16 (at most 65504).
    overflowing = (tf.float16, step_optimizer.LossScaling(2.0**24, True, 1000))
    with tf.Graph().as_default():
        equivalence_cells.PRECISIONS["overflowing"] = overflowing
        try:
            train_op = equivalence.tower_graph(
                case._replace(precision="overflowing"), images, labels, devices
            )
        finally:
            del equivalence_cells.PRECISIONS["overflowing"]
        variables = tf.compat.v1.global_variables()
        with tf.compat.v1.Session(
            config=placement.session_config(devices)
        ) as sess:
            sessions.initialise(sess)
            # Averages away from their variables: a decay would move them.
            for var in variables:
                if var.op.name.endswith(equivalence.SHADOW):
                    var.load(sess.run(var) + 1.0, sess)
            before = sess.run({v.op.name: v for v in variables})
            sess.run(train_op)
            after = sess.run({v.op.name: v for v in variables})
            gap = sessions.largest_copy_gap(
                sess, {v.op.name: v for v in variables}
            )
    return before, after, gap


@pytest.mark.parametrize(
    "update, spec", [("parameter_server", None), ("replicated", "collective")]
)
def test_a_skipped_step_leaves_every_variable_byte_identical(update, spec):
    before, after, gap = _skipped_step(update, spec)

    # What a skipped step does: count itself, halve the scale.
    assert after["global_step"] == before["global_step"] + 1
    assert after["loss_scale_skipped_steps"] == 1
    assert after["loss_scale"] == before["loss_scale"] / 2
    # The losses' averages are the summaries of the losses computed.
    bookkeeping = {"global_step", "loss_scale", "loss_scale_skipped_steps"}
    kept = [
        name
        for name in before
        if name not in bookkeeping and not name.endswith("/avg")
    ]
    assert any("moving_variance" in name for name in kept), kept
    assert any(name.endswith("ExponentialMovingAverage") for name in kept)
    for name in kept:
        assert after[name].tobytes() == before[name].tobytes(), name
    assert gap == 0.0


def test_a_cell_whose_weights_do_not_move_is_out(monkeypatch):
    layers = equivalence_cells.MODELS["layers"]
    # A rate of 0: only the batch-norm statistics and the averages move.
    frozen = layers._replace(learning_rate=lambda step, examples: 0.0)
    monkeypatch.setitem(equivalence_cells.MODELS, "layers", frozen)
    case = Case("parameter_server", None, "layers", "float32", 2)

    result, _ = equivalence.run_cell(case)

    assert result.worst <= 1.0, result
    assert (result.moved, equivalence_table.within(result)) == (False, False)


def _summed(average_gradients):
    """gradient_reduction.average_gradients planted with a sum, not the mean."""

    def summed(tower_grads, device):
        return [
            (None if grad is None else grad * len(tower_grads), var)
            for grad, var in average_gradients(tower_grads, device)
        ]

    return summed


def _one_tower_rate(build_graph):
    """build_graph planted with a rate counted from one tower's batch."""

    def planted(*, update, model, **kwargs):
        recipe = model.learning_rate

        def rate(global_step, examples):
            return recipe(global_step, examples // len(update.devices))

        return build_graph(
            update=update, model=model._replace(learning_rate=rate), **kwargs
        )

    return planted


@pytest.mark.parametrize("precision", ["float32", "float16 fixed"])
@pytest.mark.parametrize(
    "module, name, plant",
    [
        (gradient_reduction, "average_gradients", _summed),
        (cifar10_multi_gpu_train, "build_graph", _one_tower_rate),
    ],
)
def test_a_planted_bug_is_dozens_of_tolerances_out(
    monkeypatch, module, name, plant, precision
):
    monkeypatch.setattr(module, name, plant(getattr(module, name)))
    case = Case("parameter_server", None, "layers", precision, 2)

    result, _ = equivalence.run_cell(case)

    # Measured: 84 to 999,000 tolerances.
    assert result.worst > 20, result


def test_batch_norm_statistics_left_out_of_the_averages_are_named(
    monkeypatch,
):
    # The suite's list of averaged variables, planted without them.
    monkeypatch.setattr(
        any_model,
        "moving_average_variables",
        tf.compat.v1.trainable_variables,
    )
    case = Case("replicated", "collective", "layers", "float32", 2)

    result, _ = equivalence.run_cell(case)

    assert result.worst == float("inf")
    assert result.name == (
        "model/bn/moving_mean/ExponentialMovingAverage (missing on the towers)"
    )


# The block of docs/models.md that the page asks to save as my_model.py.
USER_MODEL = re.compile(
    r"<!-- file: my_model.py -->\n```python\n(.*?)```", re.S
)


@pytest.mark.slow
def test_the_runner_proves_the_user_model_of_the_docs(tmp_path):
    page = (REPO / "docs" / "models.md").read_text()
    (tmp_path / "my_model.py").write_text(USER_MODEL.search(page).group(1))
    # The user's environment: the runner quiets TensorFlow itself.
    env = {k: v for k, v in SCRIPT_ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(tmp_path)

    run = subprocess.run(
        [sys.executable, "-m", "verification.equivalence", "--fast"]
        + ["--models=my_model:small_net"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )

    assert (run.returncode, run.stderr) == (0, ""), run.stdout + run.stderr
    rows = [
        line.split()
        for line in run.stdout.splitlines()
        if line.startswith(("parameter_server ", "replicated ", WORKERS))
    ]
    cells = [
        (row[0], row[1], " ".join(row[3:-9]), int(row[-9]), row[-8])
        for row in rows
    ]
    assert cells == [
        (
            case.update,
            case.all_reduce or "-",
            case.precision,
            case.towers,
            "%g" % case.clip_norm if case.clip_norm else "-",
        )
        for case in equivalence_cells.fast_slice(["my_model:small_net"])
    ]
    assert {(row[2], row[-1]) for row in rows} == {("my_model:small_net", "ok")}
    assert run.stdout.splitlines()[-1].startswith(
        "%d cell(s), 0 out of tolerance, 0 unsettled; slowest "
        % len(equivalence_cells.fast_slice(["my_model:small_net"]))
    )


def _run_runner(*args):
    """Runs the runner in the user's environment (it quiets TensorFlow
    itself) on args that end it before its first cell."""
    env = {k: v for k, v in SCRIPT_ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-m", "verification.equivalence", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )


def test_the_runner_takes_every_model_the_trainers_take():
    run = _run_runner("--help")

    assert (run.returncode, run.stderr) == (0, "")
    assert (
        "the models, comma-separated: tutorial, resnet20, resnet56, layers, "
        "get_variable, custom_getter, trainable_decay or a MODULE:FUNCTION "
        "of yours" in " ".join(run.stdout.split())
    ), run.stdout


def test_all_reduces_keeps_the_product_cells_of_those_all_reduces_only():
    cells = equivalence_cells.product(False, ("tutorial",))
    kept = equivalence_cells.with_all_reduces(
        cells, ["collective_float16", "collective_bfloat16"]
    )

    assert kept == [
        equivalence_cells.Case(
            "workers_only", spec, "tutorial", precision, towers
        )
        for spec in ("collective_float16", "collective_bfloat16")
        for precision in equivalence_cells.PRECISIONS
        for towers in (2, 4)
    ]
    assert equivalence_cells.all_reduce_names(False) == [
        "collective",
        "one_device",
        "collective_float16",
        "collective_bfloat16",
    ]


def test_an_all_reduce_no_cell_has_is_refused_naming_the_cells_ones():
    run = _run_runner("--all_reduces=collective_float16,float16")

    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.splitlines()[-1] == (
        "equivalence.py: error: --all_reduces: no cell has all-reduce "
        "'float16'; the cells' are collective, one_device, "
        "collective_float16, collective_bfloat16"
    )


def test_cells_share_the_one_device_only_where_they_differ_in_the_update(
    monkeypatch,
):
    measured = []

    def measured_reference(case, initial, images, labels, devices):
        measured.append(case)
        return equivalence.Reference(
            {"w": np.float32(1.0)}, {"w": 1.0}, ["w"], 2, True, {"w": (1, 1)}
        )

    monkeypatch.setattr(
        equivalence, "initial_values", lambda case: {"w": np.float32(0.0)}
    )
    monkeypatch.setattr(equivalence, "measured_reference", measured_reference)
    monkeypatch.setattr(
        equivalence,
        "train_towers",
        lambda *args: ({"w": np.float32(1.0)}, [0.0]),
    )
    cell = Case("parameter_server", None, "tutorial", "float32", 2)
    cells = [
        cell,
        cell._replace(update="replicated", all_reduce="collective"),
        cell._replace(clip_norm=1.5),
        cell._replace(update="replicated", clip_norm=1.5),
        cell._replace(precision="float16 fixed"),
        # Across workers: float32 transfer as one machine's; 2 bytes apart.
        cell._replace(update=WORKERS, all_reduce="collective"),
        cell._replace(update=WORKERS, all_reduce="collective_float16"),
        cell._replace(update=WORKERS, all_reduce="collective_bfloat16"),
    ]

    results = equivalence.run_cells(cells)

    assert measured == [cells[0], cells[2], cells[4], cells[6], cells[7]]
    assert [result.worst for result in results] == [0.0] * 8
