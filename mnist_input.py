"""MNIST input: TFRecord files read, decoded and batched; the IDX converter.

The trainer reads three TFRecord files made from the four classic IDX files:
  validation.tfrecords  the first --validation_size (5,000) training images
  train.tfrecords       the other 55,000 training images
  test.tfrecords        the 10,000 test images
Each record is a `tf.train.Example` with `image_raw` (784 uint8 bytes, 28
rows of 28 pixels), `label` (int64, 0..9), `height`, `width` and `depth`.

Make them once (the IDX files are at SOURCE_URL):
  python mnist_input.py --idx_dir=/tmp/mnist_idx --data_dir=/tmp/mnist_data
"""

import os
import sys

# Run as the converter (or the installed mnist-convert), hide TensorFlow's
# C++ start-up notices before it loads; imported, stderr is left as it is.
if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "mnist-convert":
    from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import argparse  # noqa: E402
import contextlib  # noqa: E402
import re  # noqa: E402

import tensorflow as tf  # noqa: E402

from data_sets import mnist_data  # noqa: E402
from data_sets.mnist_data import (  # noqa: E402, F401 (the tutorial's names)
    DEPTH,
    HEIGHT,
    IMAGE_PIXELS,
    NUM_CLASSES,
    SOURCE_URL,
    SPLIT_FILES,
    WIDTH,
    count_records,
)

# Where the TF1 reading example's `inputs` finds the TFRecord files.
DEFAULT_DATA_DIR = "/tmp/mnist_data"

# Records held by the shuffling buffer (the tutorial's queue held 1,000 plus
# three batches; a larger buffer mixes the epoch better for little memory).
SHUFFLE_BUFFER = 10000


def data_file(data_dir, split):
    """The TFRecord file of split ('train', 'validation' or 'test')."""
    if split not in SPLIT_FILES:
        raise ValueError(
            "unknown split %r, expected one of %s"
            % (split, ", ".join(SPLIT_FILES))
        )
    filename = os.path.join(data_dir, SPLIT_FILES[split])
    if not os.path.isfile(filename):
        raise ValueError(
            "%s not found. Download the four IDX files from %s and run "
            "'python mnist_input.py --idx_dir=DIR --data_dir=%s', or pass "
            "--fake_data to use a generated sample set."
            % (filename, SOURCE_URL, data_dir)
        )
    return filename


# The label a record without one decodes to (int64's least value).
MISSING_LABEL = -(2**63)
# The first word of decode_example's assertions, and what `reading` finds
# in TensorFlow's message: 'assertion failed: [WORD] [INDEX] [VALUE]'.
_BAD_IMAGE, _BAD_LABEL = "bad_image_raw", "bad_label"
_FAILED_CHECK = re.compile(
    r"assertion failed: \[(%s|%s)\] \[(-?[0-9]+)\] \[(-?[0-9]+)\]"
    % (_BAD_IMAGE, _BAD_LABEL)
)


# tf.data's `assert_cardinality` error: 'Input dataset was expected to
# contain N elements but contained only M elements.' (or 'at least M').
_OTHER_COUNT = re.compile(
    r"expected to contain ([0-9]+) elements but contained (only |at least )"
    r"([0-9]+) elements"
)


def decode_example(index, serialized):
    """Decodes and checks one serialized `tf.train.Example` (string scalar;
    index, int64 scalar, its place in its file): image float32 [784] in
    [-0.5, 0.5], label int32 scalar in 0..9. A bad record fails the step
    with an assertion naming it, which `reading` turns into a ValueError.
    """
    features = tf.io.parse_single_example(
        serialized,
        features={
            "image_raw": tf.io.FixedLenFeature([], tf.string, ""),
            "label": tf.io.FixedLenFeature([], tf.int64, MISSING_LABEL),
        },
    )
    pixels = tf.io.decode_raw(features["image_raw"], tf.uint8)
    label = features["label"]
    checks = [
        tf.debugging.Assert(
            tf.equal(tf.size(pixels), IMAGE_PIXELS),
            [_BAD_IMAGE, index, tf.size(pixels)],
        ),
        tf.debugging.Assert(
            tf.logical_and(label >= 0, label < NUM_CLASSES),
            [_BAD_LABEL, index, label],
        ),
    ]
    with tf.control_dependencies(checks):
        pixels = tf.reshape(pixels, [IMAGE_PIXELS])
    # [0, 255] -> [-0.5, 0.5], the tutorial's scaling.
    image = tf.cast(pixels, tf.float32) * (1.0 / 255) - 0.5
    return image, tf.cast(label, tf.int32)


def dataset(data_dir, split, batch_size, num_epochs, training):
    """The decoded batches of one split: a `tf.data.Dataset` of (float32
    [batch_size, 784], int32 [batch_size]), num_epochs times (None:
    forever). training: shuffled, and every batch whole."""
    # Every record's checksum is verified as it is read; a corrupt record
    # raises `tf.errors.DataLossError` when it is reached (see `reading`).
    filename = data_file(data_dir, split)
    records = tf.data.TFRecordDataset(filename)
    # A file cut short between two records during the run would end an
    # epoch early without a word: each pass must read them all (`reading`).
    records = records.apply(
        tf.data.experimental.assert_cardinality(
            mnist_data.count_framed_records(filename)
        )
    )
    # (index in the file, record): an error names the record.
    records = records.enumerate()
    if training:
        records = records.shuffle(SHUFFLE_BUFFER)
    records = records.repeat(num_epochs)
    examples = records.map(decode_example, num_parallel_calls=tf.data.AUTOTUNE)
    return examples.batch(batch_size, drop_remainder=training).prefetch(1)


def inputs(train, batch_size, num_epochs, data_dir=DEFAULT_DATA_DIR):
    """The tutorial's `inputs`: shuffled batches of the training split (or
    the validation split), images float32 [batch_size, 784] in [-0.5, 0.5]
    and labels int32 [batch_size]."""
    split = "train" if train else "validation"
    batches = dataset(data_dir, split, batch_size, num_epochs, training=True)
    return tf.compat.v1.data.make_one_shot_iterator(batches).get_next()


@contextlib.contextmanager
def reading(filename):
    """Reports a corrupt record or a lost file, read in the block, by name:
    TensorFlow's errors say neither the file nor what to do."""
    try:
        yield
    except tf.errors.InvalidArgumentError as e:
        found = _FAILED_CHECK.search(e.message)
        if found is None:
            raise
        raise ValueError(_bad_record(filename, *found.groups())) from None
    except tf.errors.DataLossError as e:
        if e.op is None or e.op.type != "IteratorGetNext":
            raise  # Not the input: e.g. a corrupt checkpoint.
        raise ValueError(
            "%s is corrupt: a record fails its checksum or is cut short; "
            "make it again with mnist_input.py" % filename
        ) from e
    except tf.errors.FailedPreconditionError as e:
        found = _OTHER_COUNT.search(e.message)
        if found is None:
            raise
        raise ValueError(
            "%s changed during the run: it held %s records as the run "
            "started, and %s%s when read again; put it back (or make it again "
            "with mnist_input.py) and start the run again, which resumes from "
            "its newest checkpoint" % ((filename,) + found.groups())
        ) from None
    except tf.errors.NotFoundError as e:
        if e.op is None or e.op.type != "IteratorGetNext":
            raise
        # The file is opened again for each epoch.
        raise ValueError(
            "%s went away during the run; put it back (or make it again "
            "with mnist_input.py) and start the run again, which resumes "
            "from its newest checkpoint" % filename
        ) from None


def _bad_record(filename, check, index, value):
    where = "%s, record %s (from 0)" % (filename, index)
    if check == _BAD_IMAGE:
        what = "image_raw holds %s bytes, expected %d (28x28)" % (
            value,
            IMAGE_PIXELS,
        )
    elif int(value) == MISSING_LABEL:
        what = "has no label"
    else:
        what = "label %s is out of range, expected 0..%d" % (
            value,
            NUM_CLASSES - 1,
        )
    return "%s: %s; make the file again with mnist_input.py" % (where, what)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mnist_input.py",
        description="Converts the four MNIST IDX .gz files (from %s) into "
        "train.tfrecords, validation.tfrecords and test.tfrecords."
        % SOURCE_URL,
    )
    parser.add_argument(
        "--idx_dir", required=True, help="Folder that holds the .gz files."
    )
    parser.add_argument(
        "--data_dir", required=True, help="Folder to write the TFRecords to."
    )
    parser.add_argument(
        "--validation_size",
        type=int,
        default=mnist_data.VALIDATION_SIZE,
        help="The first this many training images form the validation split "
        "(default %(default)s).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace the TFRecord files --data_dir holds (each is named); "
        "without it the converter replaces none but the sample set's.",
    )
    args = parser.parse_args(argv)
    try:
        counts = mnist_data.convert(
            args.idx_dir, args.data_dir, args.validation_size, args.overwrite
        )
    except ValueError as e:
        parser.exit(1, "%s: error: %s\n" % (parser.prog, e))
    for split, count in counts.items():
        print(
            "Wrote %s: %d examples."
            % (os.path.join(args.data_dir, SPLIT_FILES[split]), count)
        )


if __name__ == "__main__":
    main()
