"""The gradients' reduction: the mean of every tower's gradients."""

import tensorflow as tf

from multigpu.graph import gradient_reduction


def test_average_gradients_is_the_mean_and_keeps_variables_without_one():
    with tf.Graph().as_default():
        a = tf.Variable(1.0)
        b = tf.Variable(2.0)
        tower_grads = [
            [(tf.constant(1.0), a), (None, b)],
            [(tf.constant(3.0), a), (None, b)],
        ]
        averaged = gradient_reduction.average_gradients(tower_grads)
        assert averaged[1] == (None, b)
        assert averaged[0][1] is a
        with tf.compat.v1.Session() as sess:
            assert sess.run(averaged[0][0]) == 2.0
