"""MNIST input: TFRecord files read, decoded and batched; the IDX converter.

The trainer reads three TFRecord files made from the four classic IDX files:
  validation.tfrecords  the first --validation_size (5,000) training images
  train.tfrecords       the other 55,000 training images
  test.tfrecords        the 10,000 test images
Each record is a `tf.train.Example` with `image_raw` (784 uint8 bytes, 28
rows of 28 pixels), `label` (int64, 0..9), `height`, `width` and `depth`.

Make them once (the IDX files are at SOURCE_URL):
  python mnist_input.py --idx_dir=/tmp/mnist_idx --data_dir=/tmp/mnist_data

Stages, one function each:
  read (`read_records`) -> decode (`decode_example`) -> batch
  (`batch_examples`), put together by `dataset` and `inputs`.

`write_fake_data` writes a small learnable digit-like set through the
converter's writer, so that the trainer runs with no download
(`--fake_data`).
"""

import argparse
import contextlib
import gzip
import os
import re
import struct
import zlib

import numpy as np
import tensorflow as tf

from multigpu import sample_sets

# Dataset facts of MNIST.
HEIGHT, WIDTH, DEPTH = 28, 28, 1
IMAGE_PIXELS = HEIGHT * WIDTH * DEPTH  # 784 bytes per image
NUM_CLASSES = 10

# The classic IDX files (gzipped) and where they are published.
SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"

# IDX magic numbers; the low byte is the number of dimensions.
IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dimensions [n, rows, columns]
LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dimension [n]

# The tutorial's `read_data_sets` keeps the first 5,000 training images apart.
VALIDATION_SIZE = 5000
# Where the TF1 reading example's `inputs` finds the TFRecord files.
DEFAULT_DATA_DIR = "/tmp/mnist_data"

# The TFRecord file of each split, as the tutorial's converter names them.
SPLIT_FILES = {
    "train": "train.tfrecords",
    "validation": "validation.tfrecords",
    "test": "test.tfrecords",
}

# Records held by the shuffling buffer (the tutorial's queue held 1,000 plus
# three batches; a larger buffer mixes the epoch better for little memory).
SHUFFLE_BUFFER = 10000

# Size of the built-in sample set, per split.
FAKE_SPLIT_SIZES = {"train": 3000, "validation": 500, "test": 1000}
# Pixel noise of the sample set (uint8 units) on top of each digit's strokes.
FAKE_NOISE_STDDEV = 50.0
# Largest random shift of a sample digit, in pixels, along each axis.
FAKE_MAX_SHIFT = 3

# Seven-segment digits: the segments lit per digit and where they are drawn,
# as (first row, last row + 1, first column, last column + 1).
SEGMENT_BOXES = {
    "a": (5, 7, 9, 19),
    "b": (5, 14, 17, 19),
    "c": (13, 23, 17, 19),
    "d": (21, 23, 9, 19),
    "e": (13, 23, 9, 11),
    "f": (5, 14, 9, 11),
    "g": (13, 15, 9, 19),
}
DIGIT_SEGMENTS = [
    "abcdef",
    "bc",
    "abdeg",
    "abcdg",
    "bcfg",
    "acdfg",
    "acdefg",
    "abc",
    "abcdefg",
    "abcdfg",
]


def data_file(data_dir, split):
    """Returns the path of one split's TFRecord file, checking it exists.

    Args:
      data_dir: str, the folder that holds the TFRecord files.
      split: 'train', 'validation' or 'test'.

    Raises:
      ValueError: an unknown split, or the file is missing.
    """
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


def read_records(filename):
    """Reads the serialized examples of one TFRecord file, in file order.

    Every record's checksum is verified as it is read; a corrupt record
    raises `tf.errors.DataLossError` when it is reached (see `reading`).

    Returns:
      A `tf.data.Dataset` of string scalars, serialized `tf.train.Example`s.
    """
    return tf.data.TFRecordDataset(filename)


# The label a record without one decodes to (int64's least value).
MISSING_LABEL = -(2**63)
# The first word of decode_example's assertions, and what `reading` finds
# in TensorFlow's message: 'assertion failed: [WORD] [INDEX] [VALUE]'.
_BAD_IMAGE, _BAD_LABEL = "bad_image_raw", "bad_label"
_FAILED_CHECK = re.compile(
    r"assertion failed: \[(%s|%s)\] \[(-?[0-9]+)\] \[(-?[0-9]+)\]"
    % (_BAD_IMAGE, _BAD_LABEL)
)


def decode_example(index, serialized):
    """Decodes one example, checking it.

    Args:
      index: int64 scalar, the record's place in its file (from 0).
      serialized: string scalar, a serialized `tf.train.Example`.

    Returns:
      image: float32 [784], the 28x28 pixels row by row, in [-0.5, 0.5].
      label: int32 scalar in 0..9.

    A record whose image is not 784 bytes, or whose label is missing or
    out of range, fails the step with an assertion naming the record;
    `reading` turns it into a `ValueError` naming the file too.
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


def batch_examples(records, batch_size, num_epochs, training):
    """Decodes and batches serialized examples.

    Args:
      records: `tf.data.Dataset` of serialized examples, from `read_records`.
      batch_size: int, examples per batch.
      num_epochs: int, passes over the records; None repeats forever.
      training: bool. True: each epoch is shuffled and the last partial
        batch is dropped, so that every batch holds batch_size examples
        and the input yields floor(num_records * num_epochs / batch_size)
        batches. False: file order, and the last batch may be smaller.

    Returns:
      A `tf.data.Dataset` of (float32 [batch_size, 784], int32 [batch_size]).
    """
    # (index in the file, record): an error names the record.
    records = records.enumerate()
    if training:
        records = records.shuffle(SHUFFLE_BUFFER)
    records = records.repeat(num_epochs)
    examples = records.map(decode_example, num_parallel_calls=tf.data.AUTOTUNE)
    return examples.batch(batch_size, drop_remainder=training).prefetch(1)


def dataset(data_dir, split, batch_size, num_epochs, training):
    """The batches of one split (see `batch_examples` for `training`).

    Args:
      data_dir: str, the folder that holds the TFRecord files.
      split: 'train', 'validation' or 'test'.
      batch_size: int, examples per batch.
      num_epochs: int, passes over the split; None repeats forever.
      training: bool, shuffle and drop the last partial batch.

    Returns:
      A `tf.data.Dataset` of (float32 [batch_size, 784], int32 [batch_size]).
    """
    records = read_records(data_file(data_dir, split))
    return batch_examples(records, batch_size, num_epochs, training)


def inputs(train, batch_size, num_epochs, data_dir=DEFAULT_DATA_DIR):
    """Shuffled batches from a one-shot iterator, as the tutorial's `inputs`.

    Args:
      train: bool, the training split (True) or the validation split.
      batch_size: int, examples per batch.
      num_epochs: int, passes over the split before the input ends with
        `tf.errors.OutOfRangeError`; None repeats forever.
      data_dir: str, the folder that holds the TFRecord files.

    Returns:
      images: float32 [batch_size, 784] in [-0.5, 0.5].
      labels: int32 [batch_size] in 0..9.
    """
    split = "train" if train else "validation"
    batches = dataset(data_dir, split, batch_size, num_epochs, training=True)
    return tf.compat.v1.data.make_one_shot_iterator(batches).get_next()


@contextlib.contextmanager
def reading(filename):
    """Reports a corrupt record of filename, read in the block, by name.

    TensorFlow's checksum error (`tf.errors.DataLossError`, 'corrupted
    record at OFFSET' among the locations of the op) says neither the file
    nor what to do; it becomes a `ValueError` that says both. So does a
    record that fails a check of `decode_example`, named by its index.
    """
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


def _bad_record(filename, check, index, value):
    """The message of a record that fails a check of `decode_example`."""
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


def count_records(filename):
    """int, the records of a TFRecord file (read eagerly, outside graphs)."""
    return int(
        tf.data.TFRecordDataset(filename).reduce(0, lambda count, _: count + 1)
    )


def write_records(filename, images, labels):
    """Writes images and labels as a TFRecord file of `tf.train.Example`s.

    The file is written aside and renamed when complete, so a crash never
    leaves a short file.

    Args:
      filename: str path.
      images: uint8 array [n, 28, 28].
      labels: integer array [n] in 0..9.
    """

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    # Written aside and renamed: a crash never leaves a short file, and
    # processes writing the same file at once (cluster tasks) do not mix.
    part = "%s.%d.tmp" % (filename, os.getpid())
    with tf.io.TFRecordWriter(part) as writer:
        for image, label in zip(images, labels):
            raw = np.asarray(image, np.uint8).tobytes()
            feature = {
                "height": int64(HEIGHT),
                "width": int64(WIDTH),
                "depth": int64(DEPTH),
                "label": int64(int(label)),
                "image_raw": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[raw])
                ),
            }
            example = tf.train.Example(
                features=tf.train.Features(feature=feature)
            )
            writer.write(example.SerializeToString())
    os.replace(part, filename)


def _gunzip(path):
    if not os.path.isfile(path):
        raise ValueError(
            "%s not found; download it from %s" % (path, SOURCE_URL)
        )
    try:
        with gzip.open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(
            "%s is not a complete gzip file (%s)" % (path, e)
        ) from e


def read_idx(path, magic):
    """Reads a gzipped IDX file of unsigned bytes, checking its header.

    Args:
      path: str, the .gz file.
      magic: int, the expected magic number, IMAGES_MAGIC or LABELS_MAGIC.

    Returns:
      uint8 array whose shape is the header's: [n, rows, columns] for
      images, [n] for labels.

    Raises:
      ValueError: the file is missing or not gzip, its magic number is not
        `magic`, or its size differs from the header's; the message names
        the file, the expected and the found value.
    """
    data = _gunzip(path)
    num_dims = magic & 0xFF
    header_bytes = 4 * (1 + num_dims)  # the magic, then one int32 per dim
    if len(data) < header_bytes:
        raise ValueError(
            "%s is truncated: %d bytes, expected a %d-byte header"
            % (path, len(data), header_bytes)
        )
    found_magic, *shape = struct.unpack(
        ">%dI" % (1 + num_dims), data[:header_bytes]
    )
    if found_magic != magic:
        raise ValueError(
            "%s: magic number %d, expected %d" % (path, found_magic, magic)
        )
    expected_bytes = header_bytes + int(np.prod(shape))
    if len(data) != expected_bytes:
        raise ValueError(
            "%s is %s: %d bytes, expected %d (a %d-byte header, then shape "
            "%s)"
            % (
                path,
                "truncated" if len(data) < expected_bytes else "too long",
                len(data),
                expected_bytes,
                header_bytes,
                "x".join(str(d) for d in shape),
            )
        )
    return np.frombuffer(data, np.uint8, offset=header_bytes).reshape(shape)


def read_idx_pair(images_path, labels_path):
    """Reads and checks the images and the labels of one IDX split.

    Returns:
      images: uint8 [n, 28, 28].
      labels: uint8 [n] in 0..9.

    Raises:
      ValueError: a bad file (see `read_idx`), images not 28x28, a label
        outside 0..9, or different image and label counts.
    """
    images = read_idx(images_path, IMAGES_MAGIC)
    labels = read_idx(labels_path, LABELS_MAGIC)
    if images.shape[1:] != (HEIGHT, WIDTH):
        raise ValueError(
            "%s: images of %dx%d pixels, expected %dx%d"
            % (images_path, *images.shape[1:], HEIGHT, WIDTH)
        )
    if len(labels) != len(images):
        raise ValueError(
            "%s: %d labels, expected %d (the number of images in %s)"
            % (labels_path, len(labels), len(images), images_path)
        )
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise ValueError(
            "%s: label %d at index %d, expected 0..%d"
            % (labels_path, labels[bad[0]], bad[0], NUM_CLASSES - 1)
        )
    return images, labels


def convert(idx_dir, data_dir, validation_size=VALIDATION_SIZE):
    """Converts the four IDX files into the three TFRecord files.

    Args:
      idx_dir: str, the folder that holds the four .gz files.
      data_dir: str, the folder to write the TFRecord files to.
      validation_size: int, how many of the first training images form the
        validation split, as in the tutorial's `read_data_sets`.

    Returns:
      dict, the number of examples written per split.

    Raises:
      ValueError: a bad IDX file (see `read_idx_pair`), or validation_size
        not between 0 and the number of training images less one.
    """
    train_images, train_labels = read_idx_pair(
        os.path.join(idx_dir, TRAIN_IMAGES),
        os.path.join(idx_dir, TRAIN_LABELS),
    )
    test_images, test_labels = read_idx_pair(
        os.path.join(idx_dir, TEST_IMAGES), os.path.join(idx_dir, TEST_LABELS)
    )
    if not 0 <= validation_size < len(train_images):
        raise ValueError(
            "--validation_size=%d, expected 0 to %d (the training images "
            "less one)" % (validation_size, len(train_images) - 1)
        )
    first, rest = slice(validation_size), slice(validation_size, None)
    splits = {
        "train": (train_images[rest], train_labels[rest]),
        "validation": (train_images[first], train_labels[first]),
        "test": (test_images, test_labels),
    }
    written = _write_splits(data_dir, splits)
    # The real splits replace a sample set written there before.
    sample_sets.unmark(data_dir)
    return written


def _write_splits(data_dir, splits):
    os.makedirs(data_dir, exist_ok=True)
    for split, (images, labels) in splits.items():
        write_records(
            os.path.join(data_dir, SPLIT_FILES[split]), images, labels
        )
    return {split: len(labels) for split, (_, labels) in splits.items()}


def fake_examples(num_examples, seed):
    """A learnable digit-like sample set: seven-segment digits plus noise.

    Each digit is drawn with its own segments, shifted at random by up to
    FAKE_MAX_SHIFT pixels and covered with pixel noise, so a classifier
    must learn the strokes' layout, not a single pixel.

    Args:
      num_examples: int.
      seed: int, for the shifts and the noise.

    Returns:
      images: uint8 [num_examples, 28, 28].
      labels: uint8 [num_examples], classes in turn (0, 1, ..., 9, 0, ...).
    """
    digits = np.zeros((NUM_CLASSES, HEIGHT, WIDTH))
    for digit, segments in enumerate(DIGIT_SEGMENTS):
        for segment in segments:
            top, bottom, left, right = SEGMENT_BOXES[segment]
            digits[digit, top:bottom, left:right] = 255.0
    rng = np.random.default_rng(seed)
    labels = np.arange(num_examples) % NUM_CLASSES
    shifts = rng.integers(
        -FAKE_MAX_SHIFT, FAKE_MAX_SHIFT + 1, (num_examples, 2)
    )
    images = np.stack(
        [
            np.roll(digits[label], shift, axis=(0, 1))
            for label, shift in zip(labels, shifts)
        ]
    )
    images += rng.normal(0.0, FAKE_NOISE_STDDEV, images.shape)
    return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.uint8)


def write_fake_data(data_dir):
    """Writes the built-in sample set under data_dir, once.

    The set is marked as such (`sample_sets`) and written only into an
    empty or marked folder, never over other files.

    Returns:
      bool, True if files were written, False if they were all there.

    Raises:
      ValueError: data_dir holds other files (named).
    """

    def is_unmarked_sample_set(folder):
        # The sample set's record counts; MNIST's are 10 to 18 times larger.
        try:
            return all(
                count_records(os.path.join(folder, SPLIT_FILES[split])) == size
                for split, size in FAKE_SPLIT_SIZES.items()
            )
        except tf.errors.OpError:
            return False  # Not even readable records.

    missing = sample_sets.files_to_write(
        data_dir, list(SPLIT_FILES.values()), is_unmarked_sample_set
    )
    splits = {
        split: fake_examples(size, seed)
        for seed, (split, size) in enumerate(FAKE_SPLIT_SIZES.items())
        if SPLIT_FILES[split] in missing
    }
    _write_splits(data_dir, splits)
    return bool(missing)


def say_if_sample_set(data_dir):
    """Prints one line when data_dir holds the sample set, not MNIST."""
    sample_sets.say_if_sample_set(data_dir, "MNIST")


def main(argv=None):
    """The converter's command line: IDX .gz files -> TFRecord files."""
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
        default=VALIDATION_SIZE,
        help="The first this many training images form the validation split "
        "(default %(default)s).",
    )
    args = parser.parse_args(argv)
    try:
        counts = convert(args.idx_dir, args.data_dir, args.validation_size)
    except ValueError as e:
        parser.exit(1, "%s: error: %s\n" % (parser.prog, e))
    for split, count in counts.items():
        print(
            "Wrote %s: %d examples."
            % (os.path.join(args.data_dir, SPLIT_FILES[split]), count)
        )


if __name__ == "__main__":
    main()
