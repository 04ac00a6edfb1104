"""Summaries: the graph's blocks, the tags every trainer writes, the losses'
averages and the eval's hits.

The blocks of a train graph are the name scopes at its top level, which
TensorBoard's Graphs page draws first: `global_step` and INPUT, MODEL, ...,
the towers' block being `towers.TOWERS_SCOPE`. The model's variables are in
the model block ('model/conv1/weights'); the checkpoints and the summaries
name them without it ('conv1/weights', as the tutorial's checkpoints do),
and without the 'tower_N/' scope (`without_blocks`). The losses are
summarised raw and as moving averages that start at the first loss
(`add_loss_summaries`); the eval counts each example's label the top
prediction, or in the top 5 (`top_k_hits`).
"""

import re

import tensorflow as tf

from multigpu.graph import towers

# The group of the charts a person looks for first (the loss, the learning
# rate): TensorBoard groups the charts by the tag's first '/' component, puts
# the groups in code-point order (capitals before the layers' lowercase
# names) and opens the first two. 'Loss' comes before the eval's 'Precision
# @ 1' and 'Recall @ 5', which come second.
FIRST_GROUP = "Loss/"


def loss_tag(name):
    """The tag of a loss: 'local3/weight_loss' as it is, 'total_loss' (a
    model-wide loss) in `FIRST_GROUP`; without its block or tower."""
    name = without_blocks(name)
    return name if "/" in name else FIRST_GROUP + name


def _summary_tag(name):
    scope = tf.compat.v1.get_default_graph().get_name_scope()
    return without_blocks(scope + "/" + name if scope else name)


def scalar_summary(name, value):
    """Adds a scalar summary to the SUMMARIES collection.

    The op lives in the current name scope (so a tower's summaries can be
    picked by its scope) while the tag leaves out the block and 'tower_N/'
    (`without_blocks`), so that every tower and trainer writes under
    the same tag, e.g. 'total_loss'.

    Args:
      name: str, the tag below the current name scope.
      value: a scalar tensor of a real dtype.
    """
    return _collect(
        tf.raw_ops.ScalarSummary(
            tags=_summary_tag(name), values=value, name=_op_name(name)
        )
    )


def histogram_summary(name, values):
    """Adds a histogram summary tagged like `scalar_summary`.

    Args:
      name: str, the tag below the current name scope.
      values: a tensor of a real dtype, any shape.
    """
    return _collect(
        tf.raw_ops.HistogramSummary(
            tag=_summary_tag(name), values=values, name=_op_name(name)
        )
    )


def last_tower_summaries(scope):
    """Merges the graph's summaries but those of all towers except one.

    Every tower creates the same summaries under the same tags; merging them
    all would repeat each tag, so only the last tower's are kept, with every
    summary made outside the towers (learning rate, histograms, ...).

    Args:
      scope: str, the name scope of the tower to keep, e.g.
        'towers/tower_1/'.

    Returns:
      A string scalar, the merged `Summary` protocol buffer.
    """
    tower = re.compile(
        "(%s/)?%s_[0-9]+/" % (towers.TOWERS_SCOPE, towers.TOWER_NAME)
    )
    kept = [
        s
        for s in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
        if s.op.name.startswith(scope) or not tower.match(s.op.name)
    ]
    with tf.name_scope(SUMMARIES + "/"):
        return tf.compat.v1.summary.merge(kept)


def split_histograms(summary_op=None):
    """Splits merged summaries into the histograms and all the others.

    A histogram is the dearest summary by far: its kernel sorts every value
    of an activation, a weight or a gradient into a bucket one at a time,
    on one thread. The tutorial net's 25 histograms cost about as much CPU
    as a training step (benchmarks/bench_hooks.py), so the trainers write
    them less often than the scalars (`loop_hooks.SummarySaverHook`).

    Args:
      summary_op: string scalar, merged summaries (a `MergeSummary`,
        nested or not) or one summary; None for the graph's SUMMARIES
        collection, as TensorFlow's scaffold merges them.

    Returns:
      (others, histograms): each a string scalar merging those summaries,
      or None where there are none. summary_op itself stands for the
      others when it holds no histogram.
    """
    if summary_op is None:
        parts = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
    else:
        parts = _merged_parts(summary_op)
    histograms = [s for s in parts if s.op.type == "HistogramSummary"]
    if not histograms:
        return summary_op, None
    others = [s for s in parts if s.op.type != "HistogramSummary"]
    with tf.name_scope(SUMMARIES + "/"):
        return (
            tf.compat.v1.summary.merge(others) if others else None,
            tf.compat.v1.summary.merge(histograms, name="histograms"),
        )


def _merged_parts(summary):
    """The summaries a string scalar merges (itself, if it merges none)."""
    if summary.op.type != "MergeSummary":
        return [summary]
    return [part for each in summary.op.inputs for part in _merged_parts(each)]


def add_histograms(grads_and_vars):
    """Histograms of every trainable variable and of its gradient, in the
    graph's summaries block.

    Args:
      grads_and_vars: list of (gradient, variable); only the model's
        variables are summarised, not the towers' copies of them.
    """
    trainable = tf.compat.v1.trainable_variables()
    with tf.name_scope(SUMMARIES + "/"):
        for var in trainable:
            histogram_summary(var.op.name, var)
        for grad, var in grads_and_vars:
            if grad is not None and any(var is each for each in trainable):
                histogram_summary(var.op.name + "/gradients", grad)


def image_summary(name, images, max_images=3):
    """Adds an image summary of the first images, tagged like the others.

    Args:
      name: str, the tag below the current name scope.
      images: float32 [batch, height, width, 1 or 3].
      max_images: int, how many images of the batch to show.
    """
    return _collect(
        tf.raw_ops.ImageSummary(
            tag=_summary_tag(name),
            tensor=images,
            max_images=max_images,
            name=_op_name(name),
        )
    )


def _op_name(tag):
    return re.sub(r"[^A-Za-z0-9_./-]", "_", tag)


def _collect(summary):
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SUMMARIES, summary)
    return summary


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


LOSS_AVERAGE_DECAY = 0.9  # Decay of the loss averages in the summaries.


def add_loss_summaries(total_loss, global_step, scope=None):
    """Summarises the losses, raw and as moving averages.

    Everything it makes is in the graph's summaries block: the tags are
    'Loss/cross_entropy', 'local3/weight_loss', ..., and
    'Loss/total_loss' (`FIRST_GROUP`), each also with ' (raw)'.
    The averages' variables are named after the losses
    ('summaries/cross_entropy/avg', saved as the tutorial's
    'cross_entropy/avg'), whichever block or tower the losses come from, so
    that every trainer's checkpoint holds the same names. The averages
    start at 0, as the tutorial's do; their summaries are zero-debiased
    (divided by 1 - decay^updates, as Adam's moments are), so that a chart
    starts at the first loss. A weight-decay term of wd 0 is averaged but
    not summarised (a flat 0).

    Args:
      total_loss: float32 scalar, e.g. cifar10's `loss` or a tower's total.
      global_step: the global step variable (int64 scalar), which counts
        the updates of the averages.
      scope: str or None, only the `losses` of this name scope (a tower).

    Returns:
      The op that updates the moving averages of the losses; the global
      step must be incremented after it (apply the gradients after it).
    """
    with tf.name_scope(SUMMARIES + "/"):
        averages = tf.compat.v1.train.ExponentialMovingAverage(
            LOSS_AVERAGE_DECAY, name="avg"
        )
        named_losses = [
            (without_blocks(each.op.name), each)
            for each in tf.compat.v1.get_collection("losses", scope)
        ] + [("total_loss", total_loss)]
        # The average's variable takes the name of the tensor it averages:
        # an identity of each loss, named as the loss in this block.
        averaged = [tf.identity(each, name=name) for name, each in named_losses]
        # This update's count since step 0, read before the averages move.
        updates = tf.cast(global_step, tf.float32) + 1.0
        with tf.control_dependencies([updates]):
            averages_op = averages.apply(averaged)
        debias = 1.0 - tf.pow(LOSS_AVERAGE_DECAY, updates)
        for (name, each), average in zip(named_losses, averaged):
            if _is_zero_weight_decay(each):
                continue
            tag = loss_tag(name)
            scalar_summary(tag + " (raw)", each)
            with tf.control_dependencies([averages_op]):
                updated = averages.average(average).read_value()
            scalar_summary(tag, updated / debias)
        return averages_op


def _is_zero_weight_decay(loss):
    """Whether loss is `variables.variable_with_weight_decay`'s wd-0 term."""
    return loss.op.type == "Mul" and tf.get_static_value(loss.op.inputs[1]) == 0


# Precision @ 1: the label is the top prediction (the tutorial's eval).
PRECISION_K = 1
# Recall @ 5: the label is among the 5 highest logits (the Inception eval).
RECALL_K = 5


def top_k_hits(logits, labels):
    """Whether each example's label is the top prediction and in the top 5.

    A label counts among the top k when fewer than k logits exceed its own
    (`tf.nn.in_top_k`: a tie at the k-th place is a hit).

    Args:
      logits: float32 [batch, num_classes].
      labels: int32 [batch], each in [0, num_classes).

    Returns:
      bool [2, batch]: row 0 the hits of precision @ 1 (PRECISION_K), row 1
      those of recall @ 5 (RECALL_K).
    """
    hits = [
        tf.nn.in_top_k(predictions=logits, targets=labels, k=k)
        for k in (PRECISION_K, RECALL_K)
    ]
    return tf.stack(hits)
