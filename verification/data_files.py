"""Writing data files in the real formats, and reading folders back."""

import os

import numpy as np

from data_sets import cifar10_data


def write_cifar10_files(data_dir, records_per_file, seed=0):
    """Writes the six CIFAR-10 record files with random colour images.

    Args:
      data_dir: the --data_dir; the files go to its cifar-10-batches-bin/.
      records_per_file: int.
      seed: int, for the images.

    Returns:
      dict file name -> (uint8 images [n, 32, 32, 3], uint8 labels [n]); the
      labels count on through the files in order: 0, 1, ..., 9, 0, ...
    """
    import cifar10_input

    folder = os.path.join(str(data_dir), cifar10_input.BATCHES_DIR)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = cifar10_input.TRAIN_FILES + cifar10_input.TEST_FILES
    written = {}
    for i, name in enumerate(names):
        images = rng.integers(0, 256, (records_per_file, 32, 32, 3), np.uint8)
        labels = (np.arange(records_per_file) + i * records_per_file) % 10
        cifar10_data.write_records(os.path.join(folder, name), images, labels)
        written[name] = images, labels.astype(np.uint8)
    return written


def folder_contents(folder):
    """Every file under folder: relative path -> bytes."""
    found = {}
    for root, _, names in os.walk(str(folder)):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, str(folder))] = f.read()
    return found


def fill_disk(disk):
    """Writes disk/filler until the disk is full; returns its path."""
    filler = disk / "filler"
    with open(str(filler), "wb") as f:
        try:
            while True:
                f.write(bytes(2**16))
                f.flush()
        except OSError:
            pass
    return filler
