"""Summaries: the graph's blocks (its top-level name scopes, which
TensorBoard draws first), the tags every trainer writes, the losses'
averages and the eval's hits.
"""

import re

import tensorflow as tf

from multigpu.graph import towers

# The charts a person looks for first: TensorBoard groups the tags by
# their first component, in code-point order, and opens the first two
# ('Loss' before the eval's 'Precision @ 1' and 'Recall @ 5').
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
    """Adds a scalar summary, tagged without block and tower: every tower
    and trainer writes 'total_loss'."""
    return _collect(
        tf.raw_ops.ScalarSummary(
            tags=_summary_tag(name), values=value, name=_op_name(name)
        )
    )


def histogram_summary(name, values):
    """Adds a histogram summary tagged like `scalar_summary`."""
    return _collect(
        tf.raw_ops.HistogramSummary(
            tag=_summary_tag(name), values=values, name=_op_name(name)
        )
    )


def last_tower_summaries(scope):
    """The graph's summaries merged (a string scalar), of the towers
    only scope's: every tower makes the same tags."""
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
    """(others, histograms): merged summaries (summary_op, or None for
    the SUMMARIES collection) split, each a string scalar or None; summary_op
    stands for the others when it holds no histogram. The tutorial net's 25
    histograms cost about a training step of CPU (benchmarks/bench_hooks.py).
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
    """Histograms of every trainable variable and of its gradient (not
    of the towers' copies)."""
    trainable = tf.compat.v1.trainable_variables()
    with tf.name_scope(SUMMARIES + "/"):
        for var in trainable:
            histogram_summary(var.op.name, var)
        for grad, var in grads_and_vars:
            if grad is not None and any(var is each for each in trainable):
                histogram_summary(var.op.name + "/gradients", grad)


def image_summary(name, images, max_images=3):
    """Adds an image summary of images (float32 [batch, height, width, 1
    or 3])."""
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
    """name without its 'towers/tower_N/' and leading blocks:
    'model/conv1/activations' and 'towers/tower_1/conv1/activations' both
    give 'conv1/activations'.
    """
    return _LEADING_BLOCKS.sub("", towers.strip_tower_prefix(name))


LOSS_AVERAGE_DECAY = 0.9  # Decay of the loss averages in the summaries.


def add_loss_summaries(total_loss, global_step, scope=None):
    """Summarises the losses, raw and as moving averages; returns the
    averages' update, which the global step (their count of updates) must be
    incremented after. The averages start at 0, as the tutorial's, and their
    summaries are zero-debiased (as Adam's moments are), so a chart starts at
    the first loss.
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
    return loss.op.type == "Mul" and tf.get_static_value(loss.op.inputs[1]) == 0


# Precision @ 1: the label is the top prediction (the tutorial's eval).
PRECISION_K = 1
# Recall @ 5: the label is among the 5 highest logits (the Inception eval).
RECALL_K = 5


def top_k_hits(logits, labels):
    """bool [2, batch]: whether each label (int32 [batch]) is the top
    prediction of logits (float32 [batch, num_classes]) (row 0, precision @
    1), and among the top 5 (row 1, recall @ 5; `tf.nn.in_top_k`: a tie at
    the k-th place is a hit).
    """
    hits = [
        tf.nn.in_top_k(predictions=logits, targets=labels, k=k)
        for k in (PRECISION_K, RECALL_K)
    ]
    return tf.stack(hits)
