"""Variables initialised as a `MonitoredSession` does, in a plain
`Session`, for the tests and verification runs that build a graph by hand,
and the towers' copies held against their variables there."""

import numpy as np
import tensorflow as tf

from multigpu.graph import towers


def initialise(session):
    """Initialises the variables as a `MonitoredSession` does, in a plain
    `Session`: the global variables, then the local init op."""
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(local_init_op())


def local_init_op():
    """The op a `Scaffold` would choose as its local init op."""
    return tf.compat.v1.train.Scaffold.get_or_default(
        "local_init_op",
        tf.compat.v1.GraphKeys.LOCAL_INIT_OP,
        tf.compat.v1.train.Scaffold.default_local_init_op,
    )


def largest_copy_gap(sess, graph_variables):
    """The largest |copy - variable| over the towers' copies (0 for none)."""
    pairs = sess.run(
        [
            (copy, graph_variables[towers.primary_name(copy.op.name)])
            for copy in tf.compat.v1.local_variables()
            if towers.primary_name(copy.op.name)
        ]
    )
    return max(
        (float(np.max(np.abs(copy - var))) for copy, var in pairs),
        default=0.0,
    )
