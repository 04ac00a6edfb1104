"""CIFAR-10 input: the binary records on disk, read, decoded and batched.

The binary version of CIFAR-10 (cifar-10-binary.tar.gz) extracts to
`cifar-10-batches-bin/` with five training files `data_batch_{1..5}.bin`
(10,000 records each) and `test_batch.bin` (10,000). A record is one label
byte followed by 3,072 image bytes, depth-major: the 1,024 red values, then
green, then blue, each 32 rows of 32.

Stages, one function each, run on whole batches (one op per batch, not
per image): read (`read_records`) -> decode (`decode_record`) -> distort
(`distortion_parameters` drawn per image, applied by `distort_batch`) or
crop (`eval_image`) -> batch (the tutorial's `distorted_inputs` and
`inputs`, on queues).

The trainers' and the eval's batches (tf.data: the training split held in
memory, a permutation per epoch) are `data_sets/cifar10_batches.py`;
writing the files (the built-in sample set, the download) is
`data_sets/cifar10_data.py`.
"""

import logging
import os
import tempfile

import numpy as np
import tensorflow as tf

# Dataset facts of the binary version.
HEIGHT, WIDTH, DEPTH = 32, 32, 3
LABEL_BYTES = 1
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH  # 3,072
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3,073
NUM_CLASSES = 10
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50000
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = 10000
TRAIN_FILES = ["data_batch_%d.bin" % i for i in range(1, 6)]
TEST_FILES = ["test_batch.bin"]
BATCHES_DIR = "cifar-10-batches-bin"

# The official archive (data_sets/cifar10_data.py downloads it).
DATA_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"

# The tutorial's default folder: the trainers' --train_dir (the eval's
# --checkpoint_dir) for --model=tutorial, in $TMPDIR (/tmp unless set);
# another model's default is TRAIN_DIR_NAME, e.g. /tmp/cifar10_train_resnet20
# (`registry.default_train_dir`).
TRAIN_DIR = os.path.join(tempfile.gettempdir(), "cifar10_train")
# The eval of a trainer's newest checkpoint, as the trainers' closing
# report prints it (`registry.next_commands`).
EVAL_COMMAND = (
    "python cifar10_eval.py --run_once --checkpoint_dir={train_dir} "
    "--data_dir={data_dir}"
)

# The tutorial's model input: a 24x24 crop of the 32x32 image, for training
# at a random offset of 0..8 in each axis.
IMAGE_SIZE = 24
MAX_CROP_OFFSET = HEIGHT - IMAGE_SIZE

# The tutorial's distortions: brightness delta and contrast factor range.
MAX_BRIGHTNESS_DELTA = 63
CONTRAST_LOWER, CONTRAST_UPPER = 0.2, 1.8

# The tutorial fills its shuffling queue with 40% of an epoch.
MIN_FRACTION_OF_EXAMPLES_IN_QUEUE = 0.4


def data_files(data_dir, eval_data=None):
    """The paths of the record files of one split in data_dir (the folder
    that holds `cifar-10-batches-bin/`): eval_data None for the training
    files, 'test' for the test file, 'train' for the training files read as
    evaluation data."""
    if eval_data not in (None, "train", "test"):
        raise ValueError(
            "--eval_data must be 'test' or 'train', got %r" % eval_data
        )
    names = TEST_FILES if eval_data == "test" else TRAIN_FILES
    return [os.path.join(data_dir, BATCHES_DIR, name) for name in names]


def check_files(filenames):
    """Checks that the record files exist and hold whole, valid records.

    Reads the label bytes only (every 3,073rd byte), so a full training set
    takes well under a second. Returns the total number of records (int);
    ValueError naming the file when one is missing, its size is not a
    multiple of 3,073 bytes, or a label is outside 0..9.
    """
    missing = [f for f in filenames if not os.path.isfile(f)]
    if missing:
        raise ValueError(missing_files_message(missing))
    total = 0
    for filename in filenames:
        size = os.path.getsize(filename)
        if size == 0 or size % RECORD_BYTES:
            raise ValueError(
                "%s: size %d bytes is not a positive multiple of the record "
                "size %d (1 label byte + 3,072 image bytes)"
                % (filename, size, RECORD_BYTES)
            )
        labels = np.fromfile(filename, dtype=np.uint8)[::RECORD_BYTES]
        bad = np.flatnonzero(labels >= NUM_CLASSES)
        if bad.size:
            raise ValueError(
                "%s: record %d has label %d, expected 0..%d"
                % (filename, bad[0], labels[bad[0]], NUM_CLASSES - 1)
            )
        total += labels.size
    return total


def missing_files_message(missing):
    """Says which record files are missing and how to get them."""
    folder = os.path.dirname(missing[0])
    names = ", ".join(os.path.basename(f) for f in missing)
    return (
        "CIFAR-10 files missing in %s: %s. Download %s and extract it in %s, "
        "or pass --fake_data to use a generated sample set."
        % (folder, names, DATA_URL, os.path.dirname(folder))
    )


def read_records(filenames):
    """A `tf.data.Dataset` of the files' (checked by `check_files`)
    records, in order: string scalars of 3,073 bytes each."""
    return tf.data.FixedLengthRecordDataset(filenames, RECORD_BYTES)


def decode_record(record):
    """Decodes one record, or a batch of them in one op: string [...] of
    3,073 bytes each (a scalar or [batch]) -> image: uint8 [..., 32, 32, 3],
    height x width x depth; label: int32 [...] in 0..9."""
    raw = tf.io.decode_raw(record, tf.uint8)  # [..., 3073]
    shape = tf.concat([tf.shape(raw)[:-1], [DEPTH, HEIGHT, WIDTH]], 0)
    depth_major = tf.reshape(raw[..., LABEL_BYTES:], shape)
    image = tf.experimental.numpy.moveaxis(depth_major, -3, -1)  # to HWC
    return image, tf.cast(raw[..., 0], tf.int32)


def distortion_parameters(batch_size):
    """Draws the tutorial's random distortions, independently per image
    (batch_size: int or int32 scalar tensor).

    Returns:
      offsets: int32 [batch_size, 2], each crop's (row, column) in 0..8.
      flips: bool [batch_size], True (probability 0.5) to flip left-right.
      brightness: float32 [batch_size], deltas uniform in [-63, 63).
      contrast: float32 [batch_size], factors uniform in [0.2, 1.8).
    """
    shape, delta = [batch_size], MAX_BRIGHTNESS_DELTA
    offsets = tf.random.uniform(shape + [2], 0, MAX_CROP_OFFSET + 1, tf.int32)
    flips = tf.random.uniform(shape) < 0.5
    brightness = tf.random.uniform(shape, -delta, delta)
    contrast = tf.random.uniform(shape, CONTRAST_LOWER, CONTRAST_UPPER)
    return offsets, flips, brightness, contrast


def distort_batch(images, offsets, flips, brightness, contrast):
    """Applies the tutorial's distortions, in its order, to each image.

    Args:
      images: uint8 [batch, 32, 32, 3].
      offsets: int32 [batch, 2], each crop's (row, column) in 0..8.
      flips: bool [batch], whether to flip each crop left-right.
      brightness: float32 [batch], the delta added to each crop.
      contrast: float32 [batch], factors: x -> (x - mean) * factor + mean.

    Returns:
      float32 [batch, 24, 24, 3], each image with mean 0 and stddev 1.
    """
    steps = tf.range(IMAGE_SIZE)
    image_rows = tf.range(tf.shape(images)[0])[:, None] * HEIGHT
    # Each crop row's first pixel among the batch's [batch * 32 * 32].
    row_starts = (image_rows + offsets[:, :1] + steps) * WIDTH  # [batch, 24]
    # One gather crops and flips: a flipped crop reads right to left.
    flipped = tf.where(flips[:, None], IMAGE_SIZE - 1 - steps, steps)
    columns = offsets[:, 1:] + flipped  # [batch, 24]
    pixels = row_starts[:, :, None] + columns[:, None, :]  # [batch, 24, 24]
    crops = tf.gather(tf.reshape(images, [-1, DEPTH]), pixels)  # uint8
    crops = tf.cast(crops, tf.float32) + brightness[:, None, None, None]
    means = tf.reduce_mean(crops, axis=[1, 2], keepdims=True)  # [batch,1,1,3]
    # (x - mean) * factor + mean, with one broadcast of the channel means
    # (such a broadcast costs several times an elementwise op).
    factors = contrast[:, None, None, None]
    crops = crops * factors + means * (1.0 - factors)
    return tf.image.per_image_standardization(crops)


def eval_image(image):
    """Prepares images for evaluation: uint8 [..., 32, 32, 3], one image or
    a batch -> float32 [..., 24, 24, 3], the central crop, standardised."""
    image = tf.image.resize_with_crop_or_pad(image, IMAGE_SIZE, IMAGE_SIZE)
    return tf.image.per_image_standardization(image)


# The tutorial's API: queue-based readers for scripts written against the
# 2017 `cifar10_input`. Here `data_dir` is the folder of the .bin files, as
# in the tutorial; our scripts use `data_sets/cifar10_batches.py`.

# The tutorial's reading threads per batching queue.
NUM_PREPROCESS_THREADS = 16


class CIFAR10Record:
    """One record read by `read_cifar10`, with the tutorial's attributes.

    Attributes:
      height, width, depth: int, 32, 32 and 3.
      key: string scalar, 'FILENAME:INDEX' of the record.
      label: int32 [1], the class in 0..9.
      uint8image: uint8 [32, 32, 3], height x width x depth.
    """

    height, width, depth = HEIGHT, WIDTH, DEPTH


def read_cifar10(filename_queue):
    """Reads the next record from the files of a queue, as the tutorial did.

    Each evaluation of the returned tensors reads one more record; the
    reader takes the next file name from the queue when a file ends.
    filename_queue: a `tf.compat.v1` queue of string file names, e.g. of
    `tf.compat.v1.train.string_input_producer`. Returns a `CIFAR10Record`.
    """
    _tensorflow_warnings_once()
    reader = tf.compat.v1.FixedLengthRecordReader(record_bytes=RECORD_BYTES)
    result = CIFAR10Record()
    result.key, value = reader.read(filename_queue)
    result.uint8image, label = decode_record(value)
    result.label = tf.reshape(label, [1])
    return result


def distorted_inputs(data_dir, batch_size):
    """Shuffled, distorted training batches from queues (the tutorial's).

    Needs the queue runners started, by `MonitoredTrainingSession` or
    `tf.compat.v1.train.start_queue_runners`. data_dir: str, the folder
    that holds `data_batch_{1..5}.bin` (ValueError when a file is missing
    or holds partial records). Each image is a random crop, randomly
    flipped left-right, with random brightness and contrast, standardised
    to mean 0 and stddev 1.

    Returns:
      images: float32 [batch_size, 24, 24, 3].
      labels: int32 [batch_size].
    """
    _tensorflow_warnings_once()
    filenames = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    num_records = check_files(filenames)
    queue = tf.compat.v1.train.string_input_producer(filenames)
    record = read_cifar10(queue)
    image = distort_batch(record.uint8image[None], *distortion_parameters(1))[0]
    return _queue_batches(
        image, record.label, num_records, batch_size, shuffle=True
    )


def inputs(eval_data, data_dir, batch_size):
    """Evaluation batches from queues (the tutorial's), in file order.

    The input cycles through the files in order, so that n examples in a
    row are n different records while n <= the records of the files (the
    tutorial's eval runs ceil(num_examples / batch_size) batches). Needs
    the queue runners started. eval_data: bool, True reads
    `test_batch.bin`, False the training files (ValueError when it is not a
    bool, or a file is missing or holds partial records).

    Returns:
      images: float32 [batch_size, 24, 24, 3], central crops, standardised.
      labels: int32 [batch_size].
    """
    _tensorflow_warnings_once()
    if isinstance(eval_data, str):
        # Our eval_inputs takes 'test' or 'train'; here 'train' would be true.
        raise ValueError(
            "eval_data is a bool (True reads %s), got %r"
            % (TEST_FILES[0], eval_data)
        )
    names = TEST_FILES if eval_data else TRAIN_FILES
    filenames = [os.path.join(data_dir, name) for name in names]
    num_records = check_files(filenames)
    queue = tf.compat.v1.train.string_input_producer(filenames, shuffle=False)
    record = read_cifar10(queue)
    image = eval_image(record.uint8image)
    return _queue_batches(
        image, record.label, num_records, batch_size, shuffle=False
    )


def _tensorflow_warnings_once():
    """Has TensorFlow's Python warnings printed once each, not twice.

    TensorFlow gives its logger a handler of its own when it loads before
    absl's handler is on the root logger (a tutorial script imports
    TensorFlow, then calls tf.app.run), and the logger also passes each
    record on to the root's: every deprecation warning of the queues came
    twice, in two formats.
    """
    logger = tf.get_logger()
    if logger.handlers and logging.getLogger().handlers:
        logger.propagate = False


def _queue_batches(image, label, num_records, batch_size, shuffle):
    """Batches single examples through a queue, as the tutorial did.

    The queue holds 40% of an epoch before the first batch (the tutorial's
    MIN_FRACTION_OF_EXAMPLES_IN_QUEUE), counted from the records the files
    hold (50,000 for the training set, as the tutorial counts), so that a
    shuffled batch mixes many files. image: float32 [24, 24, 3]; label:
    int32 [1] -> images float32 [batch_size, 24, 24, 3], labels int32
    [batch_size]. shuffle False keeps the file order with one thread.
    """
    min_queue_examples = int(num_records * MIN_FRACTION_OF_EXAMPLES_IN_QUEUE)
    capacity = min_queue_examples + 3 * batch_size
    if shuffle:
        print(
            "Filling queue with %d CIFAR images before starting to train."
            % min_queue_examples
        )
        images, labels = tf.compat.v1.train.shuffle_batch(
            [image, label],
            batch_size,
            capacity,
            min_queue_examples,
            num_threads=NUM_PREPROCESS_THREADS,
        )
    else:
        # Several threads would interleave their records out of file order.
        images, labels = tf.compat.v1.train.batch(
            [image, label], batch_size, num_threads=1, capacity=capacity
        )
    tf.compat.v1.summary.image("images", images)
    return images, tf.reshape(labels, [batch_size])
