"""MNIST on disk: its format, the IDX converter's reading and writing, the
sample set."""

import contextlib
import gzip
import os
import struct
import zlib

import numpy as np
import tensorflow as tf

from data_sets import sample_sets
from multigpu import folders

# Dataset facts of MNIST.
HEIGHT, WIDTH, DEPTH = 28, 28, 1
IMAGE_PIXELS = HEIGHT * WIDTH * DEPTH  # 784 bytes per image
NUM_CLASSES = 10

# Where the classic IDX files (gzipped) are published.
SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"

# The TFRecord file of each split, as the tutorial's converter names them.
SPLIT_FILES = {
    "train": "train.tfrecords",
    "validation": "validation.tfrecords",
    "test": "test.tfrecords",
}

# The four classic IDX files, as published at SOURCE_URL.
TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"

# IDX magic numbers; the low byte is the number of dimensions.
IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dimensions [n, rows, columns]
LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dimension [n]

# The tutorial's `read_data_sets` keeps the first 5,000 training images apart.
VALIDATION_SIZE = 5000

# Size of the built-in sample set, per split.
FAKE_SPLIT_SIZES = {"train": 3000, "validation": 500, "test": 1000}
# Pixel noise of the sample set (uint8 units) on top of each digit's strokes.
# Digits that fill the frame, strokes 5 pixels wide, this noise and shifts
# of 1: the default run (2 epochs, 120 steps) learns them, 0.916 to 1.000 of
# the test split in the runs seen; small digits of 2-pixel strokes, noise
# 50 and shifts of 3 scored 0.19 to 0.29 there (chance 0.1).
FAKE_NOISE_STDDEV = 20.0
# Largest random shift of a sample digit, in pixels, along each axis.
FAKE_MAX_SHIFT = 1
# The `sample_sets.digest` of the sample set's train.tfrecords: the set is
# known by its content, marked or not.
FAKE_TRAIN_DIGEST = "ddb5f1cfa8e905c4"


# Seven-segment digits: the segments lit per digit and where they are drawn,
# as (first row, last row + 1, first column, last column + 1).
SEGMENT_BOXES = {
    "a": (2, 7, 5, 23),
    "b": (2, 17, 18, 23),
    "c": (12, 26, 18, 23),
    "d": (21, 26, 5, 23),
    "e": (12, 26, 5, 10),
    "f": (2, 17, 5, 10),
    "g": (12, 17, 5, 23),
}
DIGIT_SEGMENTS = [
    *("abcdef", "bc", "abdeg", "abcdg", "bcfg"),
    *("acdfg", "acdefg", "abc", "abcdefg", "abcdfg"),
]


def write_records(filename, images, labels):
    """Writes images (uint8 [n, 28, 28]) and labels ([n] in 0..9) as a
    TFRecord file of `tf.train.Example`s, renamed into place when whole."""

    def int64(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    with (
        folders.written_aside(filename) as part,
        _os_errors(),
        tf.io.TFRecordWriter(part) as writer,
    ):
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
            # The features' order fixed: the same images, the same bytes
            # (`FAKE_TRAIN_DIGEST`).
            writer.write(example.SerializeToString(deterministic=True))


@contextlib.contextmanager
def _os_errors():
    try:
        yield
    except tf.errors.OpError as e:
        # 'PATH; No space left on device': the reason after the path.
        reason = e.message.strip().split("\n")[0].rsplit("; ", 1)[-1]
        raise OSError(None, reason) from None


def read_idx(path, magic):
    """A gzipped IDX file of unsigned bytes as a uint8 array of the header's
    shape; ValueError naming the file, the expected and the found value."""
    if not os.path.isfile(path):
        raise ValueError(
            "%s not found; download it from %s" % (path, SOURCE_URL)
        )
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(
            "%s is not a complete gzip file (%s)" % (path, e)
        ) from e
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
        wrong = "truncated" if len(data) < expected_bytes else "too long"
        dims = "x".join(str(d) for d in shape)
        raise ValueError(
            "%s is %s: %d bytes, expected %d (a %d-byte header, then shape "
            "%s)" % (path, wrong, len(data), expected_bytes, header_bytes, dims)
        )
    return np.frombuffer(data, np.uint8, offset=header_bytes).reshape(shape)


def read_idx_pair(images_path, labels_path):
    """The checked images (uint8 [n, 28, 28]) and labels (uint8 [n] in
    0..9) of one IDX split."""
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


def convert(
    idx_dir, data_dir, validation_size=VALIDATION_SIZE, overwrite=False
):
    """Converts the four IDX files of idx_dir into the three TFRecord files
    of data_dir: the examples written per split (a dict).

    The first validation_size training images form the validation split,
    as in the tutorial's `read_data_sets`. Without overwrite, only the
    sample set's files are replaced (ValueError).
    """
    _say_replaced(data_dir, overwrite)
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


def _say_replaced(data_dir, overwrite):
    present = [
        name
        for name in sorted(SPLIT_FILES.values())
        if os.path.lexists(os.path.join(data_dir, name))
    ]
    if not present:
        return
    sample_set = sample_sets.is_sample_set(data_dir)
    if not (overwrite or sample_set):
        raise ValueError(
            "--data_dir=%s already holds %s (not a sample set); nothing was "
            "replaced: pass an empty --data_dir, or --overwrite to replace "
            "them" % (data_dir, ", ".join(present))
        )
    what = "Replacing the built-in sample set"
    if not sample_set:
        what = "--overwrite: replacing"
    sizes = [
        "%s (%d bytes)" % (name, os.path.getsize(os.path.join(data_dir, name)))
        for name in present
    ]
    print("%s in %s: %s" % (what, data_dir, ", ".join(sizes)))


def _write_splits(data_dir, splits):
    os.makedirs(data_dir, exist_ok=True)
    for split, (images, labels) in splits.items():
        path = os.path.join(data_dir, SPLIT_FILES[split])
        write_records(path, images, labels)
    return {split: len(labels) for split, (_, labels) in splits.items()}


def fake_examples(num_examples, seed):
    """A learnable digit-like sample set: images uint8 [num_examples, 28,
    28], seven-segment digits shifted and covered with noise (seeded);
    labels uint8 [num_examples], the classes in turn."""
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
    """Writes the built-in sample set under data_dir, once (marked, and
    never over other files): True if files were written."""

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
    sample_sets.say_if_sample_set(
        data_dir, "MNIST", [_train_file(data_dir)], FAKE_TRAIN_DIGEST
    )


def training_data(data_dir):
    train_file = _train_file(data_dir)
    sample_set = sample_sets.is_sample_set(
        data_dir, [train_file], FAKE_TRAIN_DIGEST
    )
    return sample_sets.Data(
        "the MNIST sample set" if sample_set else "MNIST",
        sample_sets.fingerprint([train_file]),
    )


def _train_file(data_dir):
    return os.path.join(data_dir, SPLIT_FILES["train"])


def count_records(filename):
    """The records of a TFRecord file, read eagerly (outside graphs)."""
    return int(
        tf.data.TFRecordDataset(filename).reduce(0, lambda count, _: count + 1)
    )


def count_framed_records(filename):
    """The records of a TFRecord file by their length fields only (a uint64
    length and 4 bytes of CRC, then the data and 4 more): no tensor is
    made, so it counts inside a graph. ValueError naming the record whose
    frame passes the file's end (a corrupt length, a file cut short), which
    TensorFlow's reader may take for the file's end."""
    count, size = 0, os.path.getsize(filename)
    with open(filename, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                found = "only %d of its 12 header bytes are there" % len(header)
                raise ValueError(_past_the_end(filename, count, found, size))
            (length,) = struct.unpack("<Q", header[:8])
            end = f.tell() + length + 4
            if end > size:
                found = "its length field says %d bytes" % length
                raise ValueError(_past_the_end(filename, count, found, size))
            f.seek(end)
            count += 1
    return count


def _past_the_end(filename, index, found, size):
    return (
        "%s, record %d (from 0): %s, past the file's end at byte %d: the "
        "file is corrupt or cut short; make it again with mnist_input.py"
        % (filename, index, found, size)
    )
