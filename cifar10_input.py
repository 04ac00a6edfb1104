"""CIFAR-10 input: the binary records on disk, read, decoded and batched.

The binary version of CIFAR-10 (cifar-10-binary.tar.gz) extracts to
`cifar-10-batches-bin/` with five training files `data_batch_{1..5}.bin`
(10,000 records each) and `test_batch.bin` (10,000). A record is one label
byte followed by 3,072 image bytes, depth-major: the 1,024 red values, then
green, then blue, each 32 rows of 32. Each stage runs on whole batches.
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

# The tutorial's default --train_dir (and the eval's --checkpoint_dir) for
# --model=tutorial, in $TMPDIR (/tmp unless set).
TRAIN_DIR = os.path.join(tempfile.gettempdir(), "cifar10_train")
# The eval of a trainer's newest checkpoint, as its closing report prints.
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
    """The record files of one split under data_dir: eval_data None or
    'train' for the training files, 'test' for the test file."""
    if eval_data not in (None, "train", "test"):
        raise ValueError(
            "--eval_data must be 'test' or 'train', got %r" % eval_data
        )
    names = TEST_FILES if eval_data == "test" else TRAIN_FILES
    return [os.path.join(data_dir, BATCHES_DIR, name) for name in names]


def check_files(filenames):
    """The number of records of the files, checked whole and labelled 0..9
    (ValueError naming the file). Reads the label bytes only: a full
    training set takes well under a second."""
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
    return tf.data.FixedLengthRecordDataset(filenames, RECORD_BYTES)


def decode_record(record):
    """Decodes records, one or a batch in one op: string [...] -> image
    uint8 [..., 32, 32, 3], label int32 [...] in 0..9."""
    raw = tf.io.decode_raw(record, tf.uint8)  # [..., 3073]
    shape = tf.concat([tf.shape(raw)[:-1], [DEPTH, HEIGHT, WIDTH]], 0)
    depth_major = tf.reshape(raw[..., LABEL_BYTES:], shape)
    image = tf.experimental.numpy.moveaxis(depth_major, -3, -1)  # to HWC
    return image, tf.cast(raw[..., 0], tf.int32)


def distortion_parameters(batch_size):
    """The tutorial's random distortions, drawn per image: offsets int32
    [batch_size, 2], flips bool [batch_size], brightness deltas and contrast
    factors float32 [batch_size]."""
    shape, delta = [batch_size], MAX_BRIGHTNESS_DELTA
    offsets = tf.random.uniform(shape + [2], 0, MAX_CROP_OFFSET + 1, tf.int32)
    flips = tf.random.uniform(shape) < 0.5
    brightness = tf.random.uniform(shape, -delta, delta)
    contrast = tf.random.uniform(shape, CONTRAST_LOWER, CONTRAST_UPPER)
    return offsets, flips, brightness, contrast


def distort_batch(images, offsets, flips, brightness, contrast):
    """Applies the tutorial's distortions, in its order: images uint8
    [batch, 32, 32, 3] -> float32 [batch, 24, 24, 3], standardised."""
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
    """uint8 [..., 32, 32, 3] -> float32 [..., 24, 24, 3], the central
    crop, standardised."""
    image = tf.image.resize_with_crop_or_pad(image, IMAGE_SIZE, IMAGE_SIZE)
    return tf.image.per_image_standardization(image)


# The tutorial's queue-based readers. Here `data_dir` is the folder of the
# .bin files, as in the tutorial.

# The tutorial's reading threads per batching queue.
NUM_PREPROCESS_THREADS = 16


class CIFAR10Record:
    """One record read by `read_cifar10`, with the tutorial's attributes:
    key ('FILENAME:INDEX'), label int32 [1], uint8image uint8 [32, 32, 3].
    """

    height, width, depth = HEIGHT, WIDTH, DEPTH


def read_cifar10(filename_queue):
    """The next record of the files of filename_queue, a `CIFAR10Record`."""
    _tensorflow_warnings_once()
    reader = tf.compat.v1.FixedLengthRecordReader(record_bytes=RECORD_BYTES)
    result = CIFAR10Record()
    result.key, value = reader.read(filename_queue)
    result.uint8image, label = decode_record(value)
    result.label = tf.reshape(label, [1])
    return result


def distorted_inputs(data_dir, batch_size):
    """Shuffled, distorted training batches from queues (the tutorial's):
    images float32 [batch_size, 24, 24, 3], labels int32 [batch_size]."""
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
    """Evaluation batches from queues (the tutorial's), in file order, so
    that n examples in a row are n different records: images float32
    [batch_size, 24, 24, 3], labels int32 [batch_size]. eval_data: bool,
    True reads the test file."""
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
    """Batches single examples (image float32 [24, 24, 3], label int32
    [1]) through a queue, as the tutorial did."""
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
