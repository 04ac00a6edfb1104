"""The names of the towers' copies of the variables.

Tower i's copy of a variable is named towers/replica_i/<the variable's
name> (`replica_name`), made by `variable_update`'s tower plan;
`primary_name` reads the variable's name back from a copy's, and
`model_variables_with_copies` finds a graph's trainable variables with
their copies.
"""

import re

import tensorflow as tf

from multigpu.graph import towers

# Tower i's copies are named towers/REPLICA_SCOPE_i/<the variable's name>.
REPLICA_SCOPE = towers.REPLICA_SCOPE


def replica_name(index, name):
    """'towers/replica_<index>/<name>': the name of tower index's copy of
    name, in the graph's towers block."""
    return "%s/%s_%d/%s" % (towers.TOWERS_SCOPE, REPLICA_SCOPE, index, name)


def primary_name(name):
    """The name of the variable a copy copies, or None for no copy."""
    match = _COPY_NAME.match(name)
    return match.group(1) if match else None


_COPY_NAME = re.compile(
    "%s/%s_[0-9]+/(.+)" % (towers.TOWERS_SCOPE, REPLICA_SCOPE)
)


def model_variables_with_copies(graph):
    """The trainable variables and the towers' copies of them."""
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = {var.op.name for var in trainable}
    copies = [
        var
        for var in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        if primary_name(var.op.name) in names
    ]
    return trainable + copies
