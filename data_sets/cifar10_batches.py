"""CIFAR-10 batches for the trainers and the eval, from `cifar10_input`."""

import contextlib

import tensorflow as tf

from cifar10_input import (
    IMAGE_SIZE,
    check_files,
    data_files,
    decode_record,
    distort_batch,
    distortion_parameters,
    eval_image,
    read_records,
)

RECORDS_PER_DECODE = 1000  # Records per decode op, reading into memory.


def _map(dataset, function):
    """`dataset.map(function)`, the function traced as written.

    The functions mapped here hold no Python control flow on tensors, so
    autograph's conversion would make the very same ops; skipping it takes
    the first build of a trainer's input from 0.6-0.9 s to 0.2-0.3 s (2
    loaded cores), in every trainer process.
    """
    return dataset.map(tf.autograph.experimental.do_not_convert(function))


def distorted_dataset(data_dir, batch_size):
    """The endless, shuffled, distorted training batches of data_dir: a
    `tf.data.Dataset` of (float32 [batch_size, 24, 24, 3], int32
    [batch_size]).

    The training set is decoded once and kept in memory as one uint8
    tensor (150 MB for CIFAR-10's); each batch is a gather of its records,
    distorted whole.
    """
    filenames = data_files(data_dir)
    num_records = check_files(filenames)
    decoded = _map(
        read_records(filenames).batch(RECORDS_PER_DECODE), decode_record
    ).rebatch(num_records)
    # The cached element is the same tensors every step, not a copy.
    training_set = decoded.cache().repeat()
    # Each epoch a new permutation of the record indices; they follow each
    # other and are cut into batches across the epochs' ends, so that every
    # epoch is exactly one pass over the records and every batch is full.
    orders = tf.data.Dataset.from_tensors(tf.range(num_records)).repeat()
    orders = _map(orders, tf.random.shuffle).rebatch(
        batch_size, drop_remainder=True
    )

    def distort(training_set, order):
        images, labels = training_set
        images = tf.gather(images, order)  # [batch_size, 32, 32, 3]
        parameters = distortion_parameters(batch_size)
        return distort_batch(images, *parameters), tf.gather(labels, order)

    # One batch at a time: a parallel map took 20-50% more CPU per image.
    dataset = _map(tf.data.Dataset.zip((training_set, orders)), distort)
    return dataset.prefetch(tf.data.AUTOTUNE)


def distorted_batches(data_dir, batch_size):
    """get_next() of one iterator shared by the towers: each call reads the
    next batch, so one epoch is one pass whatever the number of towers."""
    dataset = distorted_dataset(data_dir, batch_size)
    return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next


def train_inputs(data_dir, batch_size):
    """Training batches for one tower, from a one-shot iterator: images
    float32 [batch_size, 24, 24, 3], labels int32 [batch_size]."""
    return distorted_batches(data_dir, batch_size)()


def eval_inputs(eval_data, data_dir, batch_size, num_examples):
    """The first num_examples of split eval_data ('test' or 'train') once,
    in file order: images float32 [<= batch_size, 24, 24, 3], labels int32
    [<= batch_size], and the op that rewinds the input."""
    filenames = data_files(data_dir, eval_data)
    num_records = check_files(filenames)
    if num_examples > num_records:
        raise ValueError(
            "--num_examples=%d but the %s files hold %d records"
            % (num_examples, eval_data, num_records)
        )
    dataset = read_records(filenames).take(num_examples).batch(batch_size)
    # Whole batches: one decode, one crop and one standardisation each.
    dataset = _map(
        _map(dataset, decode_record),
        lambda images, labels: (eval_image(images), labels),
    )
    dataset = dataset.prefetch(tf.data.AUTOTUNE)
    iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
    images, labels = iterator.get_next()
    return images, labels, iterator.initializer


def batch_shapes(batch_size):
    """One tower's batch: images float32 [batch_size, 24, 24, 3] and labels
    int32 [batch_size], as (shape, dtype) pairs."""
    return [
        ([batch_size, IMAGE_SIZE, IMAGE_SIZE, 3], tf.float32),
        ([batch_size], tf.int32),
    ]


@contextlib.contextmanager
def reading(data_dir):
    """A file of data_dir cut short or gone while read in the block (by a
    watching eval): one line (ValueError) naming it, in TensorFlow's words."""
    try:
        yield
    except (
        tf.errors.InvalidArgumentError,
        tf.errors.NotFoundError,
        tf.errors.DataLossError,
    ) as e:
        if e.op is None or e.op.type != "IteratorGetNext":
            raise
        # TensorFlow's own words follow the node's name.
        lines = e.message.strip().split("\n")
        node = [i for i, line in enumerate(lines) if line.startswith("Node: ")]
        said = lines[node[0] + 1 if node else 0].rstrip(".")
        raise ValueError(
            "the data changed while the eval watched (%s); put --data_dir=%s "
            "back as it was, then run the eval again" % (said, data_dir)
        ) from None
