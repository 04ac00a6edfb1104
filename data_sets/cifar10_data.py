"""CIFAR-10 on disk: writing records, the built-in sample set, the download."""

import hashlib
import os
import sys
import tarfile
import urllib.request

import numpy as np

import cifar10_input
from data_sets import sample_sets
from multigpu import folders

# The MD5 published beside the official archive (cifar10_input.DATA_URL).
DATA_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
# Seconds a download may wait for data before it gives up.
DOWNLOAD_TIMEOUT_SECS = 60

# Size of the built-in sample set: 5 x 2,000 training records, a full-size
# test file so that `cifar10_eval.py` runs with its default --num_examples.
FAKE_RECORDS_PER_TRAIN_FILE = 2000
FAKE_TEST_RECORDS = 10000
# Pixel noise of the sample set (uint8 units) on top of each class pattern.
FAKE_NOISE_STDDEV = 40.0
# The `sample_sets.digest` of the sample set's training files: the set is
# known by its content, marked or not.
FAKE_TRAIN_DIGEST = "6d44307f482267b9"


def write_records(filename, images, labels):
    """Writes images (uint8 array [n, 32, 32, 3]) and labels (integer array
    [n] in 0..9) as CIFAR-10 binary records."""
    depth_major = np.transpose(images, [0, 3, 1, 2]).reshape(len(images), -1)
    labels = np.asarray(labels, np.uint8)[:, None]
    records = np.concatenate([labels, depth_major.astype(np.uint8)], axis=1)
    with open(filename, "wb") as f:
        f.write(records.tobytes())


def fake_examples(num_examples, seed):
    """A learnable sample set: images uint8 [num_examples, 32, 32, 3], a
    coarse 4x4 colour pattern per class plus noise (seeded), which a crop or
    a flip keeps; labels uint8 [num_examples], the classes in turn."""
    patterns = np.random.default_rng(0).uniform(
        30, 225, (cifar10_input.NUM_CLASSES, 4, 4, 3)
    )
    patterns = patterns.repeat(8, axis=1).repeat(8, axis=2)  # [10, 32, 32, 3]
    labels = np.arange(num_examples) % cifar10_input.NUM_CLASSES
    shape = (num_examples, cifar10_input.HEIGHT, cifar10_input.WIDTH)
    noise = np.random.default_rng(seed).normal(
        0.0, FAKE_NOISE_STDDEV, shape + (cifar10_input.DEPTH,)
    )
    images = np.clip(patterns[labels] + noise, 0, 255).astype(np.uint8)
    return images, labels.astype(np.uint8)


def write_fake_data(data_dir):
    """Writes the built-in sample set under data_dir, once (marked, and
    never over other files): True if files were written."""
    folder = _batches_folder(data_dir)
    names = cifar10_input.TRAIN_FILES + cifar10_input.TEST_FILES
    sizes = [FAKE_RECORDS_PER_TRAIN_FILE] * len(cifar10_input.TRAIN_FILES) + [
        FAKE_TEST_RECORDS
    ]

    def is_unmarked_sample_set(folder):
        # The sample set's record counts; CIFAR-10's files are 5x larger.
        return all(
            os.path.getsize(os.path.join(folder, name))
            == size * cifar10_input.RECORD_BYTES
            for name, size in zip(names, sizes)
        )

    missing = sample_sets.files_to_write(folder, names, is_unmarked_sample_set)
    for seed, (name, size) in enumerate(zip(names, sizes), start=1):
        if name not in missing:
            continue
        images, labels = fake_examples(size, seed)
        with folders.written_aside(os.path.join(folder, name)) as part:
            write_records(part, images, labels)
    return bool(missing)


def say_if_sample_set(data_dir):
    sample_sets.say_if_sample_set(
        _batches_folder(data_dir),
        "CIFAR-10",
        cifar10_input.data_files(data_dir),
        FAKE_TRAIN_DIGEST,
    )


def holds_sample_set(data_dir):
    return sample_sets.is_sample_set(
        _batches_folder(data_dir),
        cifar10_input.data_files(data_dir),
        FAKE_TRAIN_DIGEST,
    )


def training_data(data_dir):
    return sample_sets.Data(
        description(data_dir),
        sample_sets.fingerprint(cifar10_input.data_files(data_dir)),
    )


def description(data_dir):
    if holds_sample_set(data_dir):
        return "the CIFAR-10 sample set"
    return "CIFAR-10"


def prepare_data_dir(data_dir, fake_data, url=cifar10_input.DATA_URL):
    """Makes sure data_dir holds record files: the sample set or CIFAR-10.

    Without fake_data a run never trains the sample set: a folder holding
    it is refused (ValueError, as is a failed download).
    """
    if not fake_data and holds_sample_set(data_dir):
        raise ValueError(
            "--data_dir=%s holds the built-in sample set (written by "
            "--fake_data), not CIFAR-10: pass --fake_data to train on it, or "
            "another --data_dir, where CIFAR-10 is downloaded" % data_dir
        )
    if _complete(data_dir) and (not fake_data or holds_sample_set(data_dir)):
        # Only read: a read-only copy is fine.
        say_if_sample_set(data_dir)
        return
    folders.make_folder(data_dir, "data_dir")
    if fake_data:
        write_fake_data(data_dir)
    else:
        maybe_download_and_extract(data_dir, url)
    say_if_sample_set(data_dir)


def _record_files(data_dir):
    test_files = cifar10_input.data_files(data_dir, "test")
    return cifar10_input.data_files(data_dir) + test_files


def _complete(data_dir):
    return all(os.path.isfile(f) for f in _record_files(data_dir))


def _batches_folder(data_dir):
    return os.path.join(data_dir, cifar10_input.BATCHES_DIR)


def _download(url, path):
    """Copies url to path, printing one progress line; OSError when the
    connection failed, stalled, or ended early (no file left that looks
    whole)."""
    name = os.path.basename(path)
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECS) as source:
        total = int(source.headers.get("Content-Length", 0))
        done = 0
        with open(path + ".part", "wb") as f:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                f.write(chunk)
                done += len(chunk)
                progress = "%d bytes" % done
                if total:
                    progress = "%.1f%%" % (100.0 * done / total)
                sys.stdout.write("\r>> Downloading %s %s" % (name, progress))
                sys.stdout.flush()
    print()
    if done < total:
        raise OSError("got %d of %d bytes" % (done, total))
    os.replace(path + ".part", path)


def _md5(path):
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def maybe_download_and_extract(data_dir, url=cifar10_input.DATA_URL):
    """Downloads and extracts the binary CIFAR-10 archive unless the record
    files are there; a broken archive is removed. ValueError, saying what to
    download and where, when the download or the archive fails."""
    filenames = _record_files(data_dir)
    if _complete(data_dir):
        return
    os.makedirs(data_dir, exist_ok=True)
    archive = os.path.join(data_dir, os.path.basename(url))
    missing = cifar10_input.missing_files_message(
        [f for f in filenames if not os.path.isfile(f)]
    )
    if not os.path.isfile(archive):
        try:
            _download(url, archive)
        except OSError as e:
            raise ValueError(
                "Could not download %s (%s). %s" % (url, e, missing)
            ) from e
        print("Downloaded %s, %d bytes." % (archive, os.path.getsize(archive)))
    if url == cifar10_input.DATA_URL and _md5(archive) != DATA_MD5:
        os.remove(archive)
        raise ValueError(
            "%s: MD5 differs from the published %s; removed it. %s"
            % (archive, DATA_MD5, missing)
        )
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(data_dir, filter="data")
    except (tarfile.TarError, EOFError, OSError) as e:
        os.remove(archive)
        raise ValueError(
            "%s is not a valid tar.gz archive (%s); removed it. %s"
            % (archive, e, missing)
        ) from e
    cifar10_input.check_files(filenames)
