"""The equivalence runner's verdicts mean something for any model: a NaN
or an infinity fails the cell naming where it came from, and a tolerance
wide enough to hide a planted bug says so instead of ok."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

from verification import (
    equivalence,
    equivalence_cells,
    equivalence_models,
    equivalence_reference,
    equivalence_table,
    equivalence_verdicts,
    sessions,
)
from verification import equivalence_tolerance as tolerance

Case = equivalence_table.Case
CASE = Case("parameter_server", None, "tutorial", "float32", 2)
NAN, INF = float("nan"), float("inf")


def _reference(values, spread):
    """A Reference of variables "a" and "b", settled at 2 runs."""
    return equivalence_verdicts.Reference(
        values,
        spread,
        ["a", "b"],
        2,
        True,
        {name: (each / 2, each) for name, each in spread.items()},
    )


ONE_DEVICE = {"a": np.array([1.0, 2.0]), "b": np.array([3.0])}
SPREAD = {"a": 0.25, "b": 0.5}


def test_a_nan_in_the_second_variable_of_the_towers_fails_naming_it():
    towers = {"a": np.array([1.0, 2.0]), "b": np.array([NAN])}

    worst = equivalence_verdicts.worst(
        CASE, towers, _reference(ONE_DEVICE, SPREAD)
    )

    assert worst == (INF, "nan on the towers: b", (0.25, 0.5))


def test_an_error_of_nan_counts_as_infinitely_out_not_as_0():
    towers = {"a": np.array([1.0, 2.0]), "b": np.array([NAN])}

    assert tolerance.errors(towers, ONE_DEVICE, SPREAD) == {"a": 0.0, "b": INF}
    # A NaN beside equal elements, which np.nanmax would pass over.
    assert tolerance.errors(
        {"a": np.array([1.0, NAN]), "b": np.array([3.0])}, ONE_DEVICE, SPREAD
    ) == {"a": INF, "b": 0.0}
    # A spread that is NaN (a measuring run that diverged) holds nothing.
    assert tolerance.errors(ONE_DEVICE, ONE_DEVICE, {"a": 0.25, "b": NAN}) == {
        "a": 0.0,
        "b": INF,
    }


def test_an_infinity_on_the_one_device_is_named_before_the_towers_nan():
    one_device = {"a": np.array([1.0, 2.0]), "b": np.array([3.0, -INF])}
    towers = {"a": np.array([NAN, 2.0]), "b": np.array([3.0, 4.0])}

    worst = equivalence_verdicts.worst(
        CASE, towers, _reference(one_device, SPREAD)
    )

    assert worst == (INF, "inf on the one device: b", (0.25, 0.5))


def test_a_float16_one_device_that_diverges_says_so_in_its_line():
    reference = _reference(ONE_DEVICE, {"a": 0.25, "b": NAN})
    float16 = CASE._replace(precision="float16 fixed")

    worst, line, _ = equivalence_verdicts.worst(float16, ONE_DEVICE, reference)

    assert (worst, line) == (
        INF,
        "nan on the one device's measuring runs: b; the model diverges in "
        "float16 on one device, so its float16 cells prove nothing "
        "(--precisions=float32 runs the others)",
    )


def test_a_row_of_a_nan_reads_out_naming_where_it_came_from(capsys):
    result = equivalence_table.Result(
        CASE, INF, "nan on the towers: b", 0.0, 12.0, True, 2, True, (0, 0)
    )

    equivalence_table.print_row(result)

    assert capsys.readouterr().out.split(None, 12)[12:] == [
        "OUT: nan on the towers: b\n"
    ]


def test_not_finite_names_the_first_variable_with_a_nan_or_an_infinity():
    assert tolerance.not_finite({"a": 1.0, "b": np.array([2, 3])}) is None
    assert tolerance.not_finite(
        {"a": np.float16(1.0), "b": np.array([INF, NAN]), "c": INF}
    ) == ("b", "nan")
    assert tolerance.not_finite({"a": 1.0, "c": np.float16(INF)}) == (
        "c",
        "inf",
    )


# The InceptionV2 cell: spreads of 36 to 2,200 held as ok.
START = {"w": np.array([0.5, -0.25]), "v": np.array([1.0])}
AFTER = {"w": np.array([0.4, -0.25]), "v": np.array([0.9])}


def test_one_weight_with_a_tolerance_under_half_its_move_proves_the_cell():
    # Each weight moved 0.1: 8 x 275 = 2,200 hides w, 8 x 0.006 = 0.048
    # does not hide v.
    spread = {"w": 275.0, "v": 0.006}

    assert tolerance.hidden_move(START, AFTER, spread) is None


def test_every_tolerance_half_its_weights_move_or_more_names_the_narrowest():
    # 8 x 0.00625 = 0.05, half of v's move; 8 x 275 = 2,200, w's 22,000.
    spread = {"w": 275.0, "v": 0.00625}

    name, held, move = tolerance.hidden_move(START, AFTER, spread)

    assert (name, held) == ("v", 0.05)
    assert move == pytest.approx(0.1)


def test_weights_the_steps_left_where_they_were_are_not_provable():
    spread = {"w": 2.0**-24, "v": 2.0**-23}

    assert tolerance.hidden_move(START, START, spread) == ("w", 2.0**-21, 0.0)
    assert tolerance.hidden_move({}, {}, {}) is None


def _result(hidden, worst=0.5, settled=True):
    return equivalence_table.Result(
        CASE, worst, "w", 0.0, 12.0, True, 2, settled, (0.1, 0.2), hidden
    )


@pytest.mark.parametrize(
    "hidden, worst, settled, verdict",
    [
        (
            ("model/w", 2200.0, 0.1),
            0.5,
            False,
            "not provable here: every weight's tolerance is half its move "
            "over the steps or more (the one device's own runs spread that "
            "far), the narrowest model/w's 2.2e+03, 2.2e+04 times its "
            "1.0e-01: towers that moved every weight half as far or twice "
            "as far would pass",
        ),
        (
            ("model/w", 2200.0, 0.1),
            1.5,
            True,
            "OUT: w; but every weight's tolerance is half its move over the "
            "steps or more (the one device's own runs spread that far), the "
            "narrowest model/w's 2.2e+03, 2.2e+04 times its 1.0e-01: towers "
            "that moved every weight half as far or twice as far would pass, "
            "so a variable out here may be the steps' own spread",
        ),
        (None, 0.5, True, "ok"),
    ],
)
def test_a_row_says_not_provable_of_a_cell_within_a_tolerance_that_hides(
    capsys, hidden, worst, settled, verdict
):
    equivalence_table.print_row(_result(hidden, worst, settled))

    assert capsys.readouterr().out.strip().split(None, 12)[12] == verdict


def test_each_cell_prints_its_stages_on_a_progress_line_before_its_row(
    monkeypatch, capsys
):
    @contextlib.contextmanager
    def trainer(graph_fn, devices):
        yield lambda start: ({"w": start["w"] + 1.0}, [0.0])

    monkeypatch.setattr(equivalence, "trainer", trainer)
    monkeypatch.setattr(
        equivalence, "initial_values", lambda case: {"w": np.float32(0.0)}
    )
    monkeypatch.setattr(
        equivalence, "train_towers", lambda *args: ({"w": 1.0}, [0.0])
    )
    cells = [CASE, CASE._replace(update="replicated", all_reduce="one_device")]

    equivalence.run_cells(cells)

    lines = capsys.readouterr().out.splitlines()
    assert lines[0::2] == [
        "cell 1/2 (parameter_server None tutorial float32 2 0.0): the "
        "model's start... the one device... measuring run 1... measuring "
        "run 2... the towers... done",
        "cell 2/2 (replicated one_device tutorial float32 2 0.0): the "
        "towers... done",
    ]
    assert [line.split()[0] for line in lines[1::2]] == [
        "parameter_server",
        "replicated",
    ]


def test_the_flags_pick_cells_by_update_precision_towers_and_model():
    picked = equivalence_cells.picked(
        False,
        False,
        ["tutorial"],
        None,
        [
            ("updates", "update", ["replicated"]),
            ("precisions", "precision", ["float16_fixed", "float32"]),
            ("towers", "towers", ["4"]),
        ],
    )

    assert picked == [
        Case("replicated", spec, "tutorial", precision, 4)
        for spec in ("collective", "one_device")
        for precision in ("float32", "float16 fixed")
    ]


def test_a_value_no_cell_left_has_is_refused_naming_the_flag_and_values():
    with pytest.raises(ValueError) as error:
        equivalence_cells.picked(
            False,
            True,
            None,
            None,
            [
                ("updates", "update", ["workers_only"]),
                ("towers", "towers", ["2"]),
            ],
        )

    assert str(error.value) == (
        "--towers: no cell has towers '2'; the cells' are 4"
    )


def dropout_model(images, is_training):
    """conv - ReLU - mean - dropout - dense: [batch, 10] logits."""
    layers = tf.compat.v1.layers
    x = layers.conv2d(images, 8, 3, strides=2, use_bias=False, name="conv")
    x = tf.reduce_mean(tf.nn.relu(x), [1, 2])  # [batch, 8]
    x = layers.dropout(x, rate=0.5, training=is_training)
    return layers.dense(x, 10, name="dense")


def diverging_model(images, is_training):
    """dense with a log of a negative: NaN [batch, 10] logits."""
    del is_training
    x = tf.math.log(-tf.reduce_mean(tf.abs(images), [1, 2]))  # [batch, 3]
    return tf.compat.v1.layers.dense(x, 10, name="dense")


def _run_cell_of(monkeypatch, name, build):
    """(`Result`, `Reference`) of a replicated collective float32 cell of
    2 towers of the layers model built by build."""
    model = equivalence_models.LAYERS_MODEL._replace(name=name, build=build)
    monkeypatch.setitem(equivalence_cells.MODELS, name, model)
    return equivalence.run_cell(
        Case("replicated", "collective", name, "float32", 2)
    )


def test_a_one_device_that_diverges_takes_one_measuring_run_and_is_out(
    monkeypatch,
):
    result, reference = _run_cell_of(monkeypatch, "diverging", diverging_model)

    assert (reference.runs, result.worst, result.name) == (
        1,
        INF,
        "nan on the one device: model/dense/kernel",
    )


def test_a_step_that_draws_dropout_masks_is_named_as_not_provable(
    monkeypatch,
):
    result, reference = _run_cell_of(monkeypatch, "dropout", dropout_model)

    # One measuring run: no tolerance could hold other masks.
    assert (reference.runs, result.random_op) == (
        1,
        "slice_1/dropout/dropout/random_uniform/RandomUniform (RandomUniform)",
    )


def test_a_row_of_a_step_that_draws_random_numbers_reads_not_provable(
    capsys,
):
    drawn = _result(None, worst=3.5)._replace(random_op="model/d (Multinomial)")

    equivalence_table.print_row(drawn)

    assert capsys.readouterr().out.strip().split(None, 12)[12] == (
        "not provable here: the step draws random numbers (model/d "
        "(Multinomial)), each tower its own, apart from the one device's: "
        "dropout's masks differ by mode; prove the model built with a "
        "dropout rate of 0"
    )
    assert equivalence_table.print_summary([drawn]) == 1
    assert capsys.readouterr().out.startswith(
        "1 cell(s), 0 out of tolerance, 0 unsettled, 1 not provable here;"
    )


def test_random_op_finds_a_draw_in_the_step_but_not_in_an_initializer():
    with tf.Graph().as_default():
        weights = tf.compat.v1.get_variable(
            "w", [3], initializer=tf.compat.v1.random_normal_initializer()
        )
        plain = tf.compat.v1.assign_add(weights, tf.ones([3]))
        noisy = tf.compat.v1.assign_add(
            weights, tf.random.uniform([3], name="noise")
        )
        with tf.control_dependencies([noisy]):
            after_noise = tf.no_op()

        assert equivalence_reference.random_op(plain.op) is None
        assert equivalence_reference.random_op(after_noise) == (
            "noise/RandomUniform (RandomUniform)"
        )


def test_a_nan_is_out_even_in_a_step_that_draws_random_numbers(capsys):
    diverged = _result(None, worst=INF, settled=False)._replace(
        name="nan on the one device: w", random_op="model/d (RandomUniform)"
    )

    equivalence_table.print_row(diverged)

    assert capsys.readouterr().out.strip().split(None, 12)[12] == (
        "OUT: nan on the one device: w"
    )
    assert equivalence_table.print_summary([diverged]) == 1
    assert capsys.readouterr().out.startswith(
        "1 cell(s), 1 out of tolerance, 0 unsettled;"
    )


def test_a_copy_gap_is_0_for_equal_nans_and_inf_for_a_nan_on_one_side():
    var = np.array([1.0, NAN, INF])

    assert sessions.copy_gap(var.copy(), var) == 0.0
    assert sessions.copy_gap(np.array([1.5, NAN, INF]), var) == 0.5
    assert sessions.copy_gap(np.array([1.0, 2.0, INF]), var) == INF
    assert sessions.copy_gap(np.array([NAN, NAN, INF]), var) == INF
    assert sessions.copy_gap(np.array([1.0, NAN, -INF]), var) == INF
