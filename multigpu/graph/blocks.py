"""The blocks of a train graph: the name scopes at its top level.

TensorBoard's Graphs page draws a graph by its name scopes, the top level
first. A train graph's top level holds the model's variables, named as the
tutorial's checkpoints name them ('conv1', ..., 'softmax_linear',
'global_step'), and these blocks, each of which expands into its stages.
The towers' block is `towers.TOWERS_SCOPE`.
"""

import re

from multigpu.graph import towers

# Reading, decoding, distorting and batching the examples.
INPUT = "input"
# One device's inference and loss (the N-tower trainers have their towers).
MODEL = "model"
# The towers' gradients and losses brought together.
REDUCE = "reduce"
# The learning rate, the gradients' application and the moving averages.
UPDATE = "update"
# The summaries of the losses and variables, and the loss averages.
SUMMARIES = "summaries"
# The session's own ops: initialisation, readiness checks, the saver.
SESSION = "session"

_LEADING_BLOCK = re.compile("^(%s)/" % "|".join((MODEL, UPDATE, SUMMARIES)))


def without_blocks(name):
    """Returns name without its leading block and its 'towers/tower_N/':
    'model/conv1/activations' and 'towers/tower_1/conv1/activations' both
    give 'conv1/activations', the tag every trainer writes."""
    return towers.strip_tower_prefix(_LEADING_BLOCK.sub("", name))
