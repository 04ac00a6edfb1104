"""The eval's hits: precision @ 1 and recall @ 5 on logits of known ranks."""

import numpy as np
import tensorflow as tf

from multigpu.graph import summaries

NUM_CLASSES = 10
# (label, logits above the label's, logits tied with it): the label's rank.
RANKS = [
    (3, 0, 0),  # first: a hit of both
    (0, 9, 0),  # last: a miss of both
    (7, 2, 0),  # third: a hit of recall @ 5 only
    (2, 4, 0),  # fifth: the last place recall @ 5 counts
    (9, 5, 0),  # sixth: a miss of both
    (5, 0, 4),  # tied first with 4 others: a hit of both (in_top_k)
]


def _logits(label, above, tied):
    """float32 [NUM_CLASSES]: `above` logits above the label's, `tied` equal."""
    row = np.full(NUM_CLASSES, -1.0, np.float32)
    others = [c for c in range(NUM_CLASSES) if c != label]
    row[others[:above]] = 1.0
    row[others[above : above + tied]] = 0.0
    row[label] = 0.0
    return row


def test_precision_at_1_and_recall_at_5_count_the_labels_of_their_ranks():
    logits = np.stack([_logits(*rank) for rank in RANKS])
    labels = np.array([label for label, _, _ in RANKS], np.int32)

    hits = summaries.top_k_hits(tf.constant(logits), tf.constant(labels))

    assert hits.dtype == tf.bool
    np.testing.assert_array_equal(
        hits.numpy(),
        [
            [True, False, False, False, False, True],
            [True, False, True, True, False, True],
        ],
    )
    assert np.sum(hits.numpy(), axis=1).tolist() == [2, 4]
