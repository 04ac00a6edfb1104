"""TF1 idioms of real model code train on the towers as on one device.

TensorFlow's official ResNet (official/resnet/resnet_model.py and its run
loop) writes two: a custom getter that passes its arguments on by position,
and a weight decay over `tf.compat.v1.trainable_variables()`, which in
replicated mode reads tower 0's variables from every tower. Each is a model
of the equivalence runner (verification/equivalence_models.py), trained here
against one device on the whole batch.
"""

import pytest
import tensorflow as tf

from multigpu.graph import any_model
from verification import equivalence, equivalence_table

Case = equivalence_table.Case
# The custom getter's model as a user's --model=MODULE:FUNCTION, whose
# variables `variables.checked_variables` checks as it asks for them.
USER_GETTER_MODEL = "verification.equivalence_models:custom_getter_model"


def test_a_getter_passing_shape_and_dtype_by_position_trains_as_one_device():
    case = Case(
        "replicated", "collective", USER_GETTER_MODEL, "float16 fixed", 2
    )
    result, _ = equivalence.run_cell(case)
    assert result.moved
    assert result.worst <= 1.0, result
    assert result.copy_gap == 0.0, result


@pytest.mark.parametrize(
    "update, spec", [("replicated", "collective"), ("parameter_server", None)]
)
def test_a_decay_over_the_trainable_variables_trains_as_one_device(
    update, spec
):
    case = Case(update, spec, "trainable_decay", "float32", 2)
    result, _ = equivalence.run_cell(case)
    assert result.moved
    assert result.worst <= 1.0, result
    assert result.copy_gap == 0.0, result


# A user's model whose custom getter passes every argument of TF1's getter
# on by position, in its order.
ALL_BY_POSITION = """
import tensorflow as tf

ORDER = %r


def all_by_position(getter, **kwargs):
    return getter(*[kwargs[name] for name in ORDER])


def net(images, is_training):
    with tf.compat.v1.variable_scope("net", custom_getter=all_by_position):
        x = tf.compat.v1.layers.conv2d(images, 4, 3, name="conv")
        x = tf.reduce_mean(tf.nn.relu(x), [1, 2])
        return tf.compat.v1.layers.dense(x, 10, name="dense")
""" % (any_model.PARAMETERS,)


def test_a_getter_passing_every_argument_by_position_builds_every_copy(
    tmp_path, monkeypatch
):
    tmp_path.joinpath("all_by_position.py").write_text(ALL_BY_POSITION)
    monkeypatch.syspath_prepend(str(tmp_path))
    case = Case(
        "replicated", "collective", "all_by_position:net", "float16 fixed", 2
    )
    images, labels = equivalence.batches(case)
    with tf.Graph().as_default():
        equivalence.tower_graph(case, images, labels, ["/cpu:0", "/cpu:1"])
        weights = {
            var.op.name: var.dtype.base_dtype
            for var in tf.compat.v1.trainable_variables()
        }
        copies = [var.op.name for var in tf.compat.v1.local_variables()]
    names = [
        "net/conv/kernel",
        "net/conv/bias",
        "net/dense/kernel",
        "net/dense/bias",
    ]
    assert weights == {"model/" + name: tf.float32 for name in names}
    assert copies == ["towers/replica_1/model/" + name for name in names]


def test_a_getters_arguments_by_position_are_named_in_tf1s_order():
    assert any_model.by_name(("w", [3], "float16"), {"trainable": False}) == {
        "name": "w",
        "shape": [3],
        "dtype": "float16",
        "trainable": False,
    }


def test_a_getter_argument_given_by_position_and_by_name_is_refused():
    with pytest.raises(TypeError) as error:
        any_model.by_name(("w", [3]), {"shape": [4], "name": "v"})
    assert str(error.value) == (
        "a variable getter got name, shape by position and by name"
    )


def test_more_getter_arguments_by_position_than_tf1s_getter_takes_are_refused():
    with pytest.raises(TypeError) as error:
        any_model.by_name(tuple(range(16)), {})
    assert str(error.value) == (
        "a variable getter takes at most 15 arguments by position (name, "
        "shape, dtype, initializer, regularizer, reuse, trainable, "
        "collections, caching_device, partitioner, validate_shape, "
        "use_resource, constraint, synchronization, aggregation), got 16"
    )
