"""Summaries tagged without the 'tower_N/' scope, and the last tower's."""

import re

import tensorflow as tf

from multigpu.graph import blocks, towers

# The group of the charts a person looks for first (the loss, the learning
# rate): TensorBoard groups the charts by the tag's first '/' component, puts
# the groups in code-point order (capitals before the layers' lowercase
# names) and opens the first two. 'Loss' comes before the eval's 'Precision
# @ 1' and 'Recall @ 5', which come second.
FIRST_GROUP = "Loss/"


def loss_tag(name):
    """The tag of a loss: 'local3/weight_loss' as it is, 'total_loss' (a
    model-wide loss) in `FIRST_GROUP`; without its block or tower."""
    name = blocks.without_blocks(name)
    return name if "/" in name else FIRST_GROUP + name


def _summary_tag(name):
    scope = tf.compat.v1.get_default_graph().get_name_scope()
    return blocks.without_blocks(scope + "/" + name if scope else name)


def scalar_summary(name, value):
    """Adds a scalar summary to the SUMMARIES collection.

    The op lives in the current name scope (so a tower's summaries can be
    picked by its scope) while the tag leaves out the block and 'tower_N/'
    (`blocks.without_blocks`), so that every tower and trainer writes under
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
    with tf.name_scope(blocks.SUMMARIES + "/"):
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
    with tf.name_scope(blocks.SUMMARIES + "/"):
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
    with tf.name_scope(blocks.SUMMARIES + "/"):
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
