"""The blocks of a train graph: the name scopes at its top level.

TensorBoard's Graphs page draws a graph by its name scopes, the top level
first. A train graph's top level holds `global_step` and these blocks, each
of which expands into its stages; the towers' block is
`towers.TOWERS_SCOPE`. The model's variables are in the model block
('model/conv1/weights'); the checkpoints and the summaries name them
without it ('conv1/weights', as the tutorial's checkpoints do).
"""

import re

from multigpu.graph import towers

# Reading, decoding, distorting and batching the examples.
INPUT = "input"
# The model's variables, and one device's inference and loss (the N-tower
# trainers compute in their towers).
MODEL = "model"
# The towers' gradients and losses brought together.
REDUCE = "reduce"
# The learning rate, the gradients' application and the moving averages.
UPDATE = "update"
# The summaries of the losses and variables, and the loss averages.
SUMMARIES = "summaries"
# The session's own ops: initialisation, readiness checks, the saver.
SESSION = "session"

# The blocks that the names of checkpoints and summaries leave out, as the
# leading scopes of a name (`without_blocks`).
SAVED_WITHOUT = (MODEL, UPDATE, SUMMARIES)
_LEADING_BLOCKS = re.compile("^(?:(?:%s)/)+" % "|".join(SAVED_WITHOUT))


def without_blocks(name):
    """Returns name without its 'towers/tower_N/' and its leading blocks:
    'model/conv1/activations' and 'towers/tower_1/conv1/activations' both
    give 'conv1/activations', the tag every trainer writes, and
    'summaries/model/conv1/weights' gives 'conv1/weights'."""
    return _LEADING_BLOCKS.sub("", towers.strip_tower_prefix(name))
