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
    return max((copy_gap(copy, var) for copy, var in pairs), default=0.0)


def copy_gap(copy, var):
    """The largest |copy - var| of two arrays: 0 where they hold the same
    values, a NaN where the variable does too; inf where one holds a NaN
    or an infinity that the other does not (a NaN gap would pass `max`)."""
    same = (copy == var) | (np.isnan(copy) & np.isnan(var))
    with np.errstate(invalid="ignore"):
        gaps = np.where(same, 0.0, np.abs(copy - var))
    gaps = np.where(np.isnan(gaps), np.inf, gaps)
    return float(np.max(gaps, initial=0.0))
