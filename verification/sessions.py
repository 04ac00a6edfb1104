"""Variables initialised as a `MonitoredSession` does, in a plain
`Session`, for the tests and verification runs that build a graph by hand."""

import tensorflow as tf


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
