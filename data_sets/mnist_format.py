"""MNIST's format: the dataset facts, the published files, the TFRecords.

`mnist_input` (the tutorial's reader) and `data_sets/mnist_data.py` (the
converter and the sample set) both stand on these facts.
"""

import os
import struct

import tensorflow as tf

# Dataset facts of MNIST.
HEIGHT, WIDTH, DEPTH = 28, 28, 1
IMAGE_PIXELS = HEIGHT * WIDTH * DEPTH  # 784 bytes per image
NUM_CLASSES = 10

# The classic IDX files (gzipped) and where they are published.
SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"

# The TFRecord file of each split, as the tutorial's converter names them.
SPLIT_FILES = {
    "train": "train.tfrecords",
    "validation": "validation.tfrecords",
    "test": "test.tfrecords",
}


def count_records(filename):
    """int, the records of a TFRecord file (read eagerly, outside graphs)."""
    return int(
        tf.data.TFRecordDataset(filename).reduce(0, lambda count, _: count + 1)
    )


def count_framed_records(filename):
    """int, the records of a TFRecord file read by their length fields only
    (a uint64 length and 4 bytes of CRC, then the data and 4 more): no
    checksum is checked and no tensor made, so it counts inside a graph."""
    count = 0
    with open(filename, "rb") as f:
        while len(header := f.read(12)) == 12:
            (length,) = struct.unpack("<Q", header[:8])
            f.seek(length + 4, os.SEEK_CUR)
            count += 1
    return count
