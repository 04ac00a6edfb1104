"""The eval's hits: each example's label the top prediction, or in the top 5."""

import tensorflow as tf

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
