"""MNIST files written in the real formats: IDX, and TFRecord offsets."""

import gzip
import struct

import numpy as np


def write_idx(path, array, magic, header_shape=None, cut_bytes=0):
    """Writes a gzipped IDX file of uint8 values.

    Args:
      path: the .gz file.
      array: uint8 array; its shape goes in the header.
      magic: int, the magic number to write.
      header_shape: tuple, written instead of array.shape.
      cut_bytes: int, bytes left off the end (a truncated file).
    """
    shape = array.shape if header_shape is None else header_shape
    data = struct.pack(">%dI" % (1 + len(shape)), magic, *shape)
    data += np.asarray(array, np.uint8).tobytes()
    with gzip.open(path, "wb") as f:
        f.write(data[: len(data) - cut_bytes])


def random_split(num_examples, seed):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (num_examples, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, num_examples, dtype=np.uint8)
    return images, labels


def record_offset(data, index):
    """Where record `index` of a TFRecord file starts.

    A record is its length (uint64, little-endian), a 4-byte checksum, the
    data and a 4-byte checksum.
    """
    offset = 0
    for _ in range(index):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 8 + 4 + length + 4
    return offset
