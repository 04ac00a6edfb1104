"""One model, whatever the mode: the towers train what one device trains.

Every test here goes through the one N-tower harness of the equivalence
runner (benchmarks/equivalence.py): the multi-GPU trainer's own
`build_graph` on virtual CPU towers against one device on the whole batch.
"""

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import equivalence, equivalence_models
from multigpu.graph import loss_scale, placement, variable_update

Case = equivalence.Case


def _cell(case, *marks):
    return pytest.param(case, marks=marks, id="-".join(map(str, case)))


@pytest.mark.parametrize(
    "case",
    [_cell(case) for case in equivalence.fast_slice()]
    + [_cell(equivalence.RESNET_CELL, pytest.mark.slow)],
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
        equivalence.PRECISIONS,
        "float32 scaled",
        (tf.float32, loss_scale.LossScaling(1024.0, True, 1000)),
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
    overflowing = (tf.float16, loss_scale.LossScaling(2.0**24, True, 1000))
    with tf.Graph().as_default():
        equivalence.PRECISIONS["overflowing"] = overflowing
        try:
            train_op = equivalence.tower_graph(
                case._replace(precision="overflowing"), images, labels, devices
            )
        finally:
            del equivalence.PRECISIONS["overflowing"]
        variables = tf.compat.v1.global_variables()
        with tf.compat.v1.Session(
            config=placement.session_config(devices)
        ) as sess:
            variable_update.initialise(sess)
            # Averages away from their variables: a decay would move them.
            for var in variables:
                if var.op.name.endswith(equivalence.SHADOW):
                    var.load(sess.run(var) + 1.0, sess)
            before = sess.run({v.op.name: v for v in variables})
            sess.run(train_op)
            after = sess.run({v.op.name: v for v in variables})
            gap = equivalence.largest_copy_gap(
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
