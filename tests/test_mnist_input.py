"""mnist_input: the IDX converter, the TFRecord reader and the sample set."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import error_line, folder_contents, run_script
from helpers.mnist_files import random_split, record_offset, write_idx

import mnist_input
from data_sets import mnist_data

NUM_TRAIN_IDX, NUM_TEST_IDX = 30, 12


@pytest.fixture
def idx_dir(tmp_path):
    """The four IDX files, 30 training and 12 test images at random."""
    folder = tmp_path / "idx"
    folder.mkdir()
    for (images_name, labels_name), size, seed in [
        ((mnist_data.TRAIN_IMAGES, mnist_data.TRAIN_LABELS), 30, 1),
        ((mnist_data.TEST_IMAGES, mnist_data.TEST_LABELS), 12, 2),
    ]:
        images, labels = random_split(size, seed)
        write_idx(folder / images_name, images, mnist_data.IMAGES_MAGIC)
        write_idx(folder / labels_name, labels, mnist_data.LABELS_MAGIC)
    return folder


def read_split(data_dir, split):
    """Every example of a split in file order: uint8 [n, 784], int32 [n]."""
    with tf.Graph().as_default():
        batches = mnist_input.dataset(
            str(data_dir), split, 7, num_epochs=1, training=False
        )
        images, labels = tf.compat.v1.data.make_one_shot_iterator(
            batches
        ).get_next()
        all_images, all_labels = [], []
        with tf.compat.v1.Session() as sess:
            try:
                while True:
                    batch_images, batch_labels = sess.run([images, labels])
                    all_images.append(batch_images)
                    all_labels.append(batch_labels)
            except tf.errors.OutOfRangeError:
                pass
    pixels = np.round((np.concatenate(all_images) + 0.5) * 255)
    return pixels.astype(np.uint8), np.concatenate(all_labels)


def test_converter_round_trips_the_idx_pixels_and_labels(idx_dir, tmp_path):
    counts = mnist_data.convert(str(idx_dir), str(tmp_path / "data"), 10)
    assert counts == {"train": 20, "validation": 10, "test": 12}
    train_images, train_labels = random_split(NUM_TRAIN_IDX, 1)
    test_images, test_labels = random_split(NUM_TEST_IDX, 2)
    expected = {
        "train": (train_images[10:], train_labels[10:]),
        "validation": (train_images[:10], train_labels[:10]),
        "test": (test_images, test_labels),
    }
    for split, (images, labels) in expected.items():
        pixels, read_labels = read_split(tmp_path / "data", split)
        np.testing.assert_array_equal(pixels, images.reshape(-1, 784))
        np.testing.assert_array_equal(read_labels, labels)
        assert read_labels.dtype == np.int32


@pytest.mark.slow
def test_converter_script_splits_off_the_first_validation_size_images(
    idx_dir, tmp_path
):
    data_dir = tmp_path / "data"
    run_script(
        "mnist_input.py",
        "--idx_dir=%s" % idx_dir,
        "--data_dir=%s" % data_dir,
        "--validation_size=4",
    )
    sizes = {
        s: len(read_split(data_dir, s)[1]) for s in mnist_input.SPLIT_FILES
    }
    assert sizes == {"train": 26, "validation": 4, "test": 12}
    # The tutorial's read_data_sets: validation = train_images[:4].
    train_images, _ = random_split(NUM_TRAIN_IDX, 1)
    pixels, _ = read_split(data_dir, "validation")
    np.testing.assert_array_equal(pixels, train_images[:4].reshape(-1, 784))


@pytest.mark.slow
def test_converter_script_reports_a_bad_file_in_one_line(idx_dir, tmp_path):
    labels_file = idx_dir / mnist_data.TRAIN_LABELS
    write_idx(labels_file, np.zeros(30), mnist_data.IMAGES_MAGIC)
    result = run_script(
        "mnist_input.py",
        "--idx_dir=%s" % idx_dir,
        "--data_dir=%s" % (tmp_path / "data"),
        expect_success=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "mnist_input.py: error: %s: magic number 2051, expected 2049"
        % labels_file
    )


# Another data set's split files, which the converter must not replace.
OTHER_DATA = {
    "train.tfrecords": b"another data set's training records",
    "test.tfrecords": b"another data set's test records",
}


def _data_dir_of_other_records(tmp_path):
    """tmp_path/data holding OTHER_DATA's files; returns the folder."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name, content in OTHER_DATA.items():
        (data_dir / name).write_bytes(content)
    return data_dir


@pytest.mark.slow
def test_converter_refuses_a_data_dir_of_other_records_and_keeps_their_bytes(
    idx_dir, tmp_path
):
    data_dir = _data_dir_of_other_records(tmp_path)
    line = error_line(
        "mnist_input.py", "--idx_dir=%s" % idx_dir, "--data_dir=%s" % data_dir
    )
    assert line == (
        "mnist_input.py: error: --data_dir=%s already holds test.tfrecords, "
        "train.tfrecords (not a sample set); nothing was replaced: pass an "
        "empty --data_dir, or --overwrite to replace them" % data_dir
    )
    assert folder_contents(data_dir) == OTHER_DATA


@pytest.mark.slow
def test_converter_with_overwrite_names_each_file_it_replaces(
    idx_dir, tmp_path
):
    data_dir = _data_dir_of_other_records(tmp_path)
    result = run_script(
        "mnist_input.py",
        "--idx_dir=%s" % idx_dir,
        "--data_dir=%s" % data_dir,
        "--validation_size=4",
        "--overwrite",
    )
    assert result.stdout.splitlines()[0] == (
        "--overwrite: replacing in %s: test.tfrecords (31 bytes), "
        "train.tfrecords (35 bytes)" % data_dir
    )
    assert len(read_split(data_dir, "train")[1]) == 26


def test_converter_replaces_a_sample_set_and_says_so(idx_dir, tmp_path, capsys):
    data_dir = str(tmp_path / "data")
    mnist_data.write_fake_data(data_dir)
    sizes = [
        "%s (%d bytes)" % (name, os.path.getsize(os.path.join(data_dir, name)))
        for name in sorted(mnist_input.SPLIT_FILES.values())
    ]
    capsys.readouterr()
    assert mnist_data.convert(str(idx_dir), data_dir, 10)["train"] == 20
    assert capsys.readouterr().out.splitlines()[0] == (
        "Replacing the built-in sample set in %s: %s"
        % (data_dir, ", ".join(sizes))
    )


def conversion_error(idx_dir, validation_size=mnist_data.VALIDATION_SIZE):
    """Converts idx_dir, expecting a ValueError; returns its message."""
    with pytest.raises(ValueError) as error:
        mnist_data.convert(str(idx_dir), str(idx_dir / "out"), validation_size)
    return str(error.value)


def test_wrong_magic_number_names_the_file_and_both_numbers(idx_dir):
    images_file = idx_dir / mnist_data.TEST_IMAGES
    images, _ = random_split(NUM_TEST_IDX, 2)
    write_idx(images_file, images, 2049)
    assert conversion_error(idx_dir) == (
        "%s: magic number 2049, expected 2051" % images_file
    )


def test_image_and_label_counts_must_match(idx_dir):
    labels_file = idx_dir / mnist_data.TRAIN_LABELS
    write_idx(labels_file, np.zeros(29), mnist_data.LABELS_MAGIC)
    assert conversion_error(idx_dir) == (
        "%s: 29 labels, expected 30 (the number of images in %s)"
        % (labels_file, idx_dir / mnist_data.TRAIN_IMAGES)
    )


def test_truncated_file_names_the_expected_and_found_sizes(idx_dir):
    images_file = idx_dir / mnist_data.TRAIN_IMAGES
    images, _ = random_split(NUM_TRAIN_IDX, 1)
    write_idx(images_file, images, mnist_data.IMAGES_MAGIC, cut_bytes=100)
    expected = 16 + 30 * 784
    assert conversion_error(idx_dir) == (
        "%s is truncated: %d bytes, expected %d (a 16-byte header, then "
        "shape 30x28x28)" % (images_file, expected - 100, expected)
    )


def test_truncated_gzip_stream_is_reported_by_name(idx_dir):
    labels_file = idx_dir / mnist_data.TEST_LABELS
    data = labels_file.read_bytes()
    labels_file.write_bytes(data[: len(data) // 2])
    message = "^%s is not a complete gzip file" % re.escape(str(labels_file))
    with pytest.raises(ValueError, match=message):
        mnist_data.convert(str(idx_dir), str(idx_dir / "out"))


def test_images_must_be_28_by_28(idx_dir):
    images_file = idx_dir / mnist_data.TRAIN_IMAGES
    write_idx(images_file, np.zeros((30, 28, 27)), mnist_data.IMAGES_MAGIC)
    assert conversion_error(idx_dir) == (
        "%s: images of 28x27 pixels, expected 28x28" % images_file
    )


def test_labels_must_be_digits(idx_dir):
    labels_file = idx_dir / mnist_data.TEST_LABELS
    labels = np.zeros(NUM_TEST_IDX)
    labels[5] = 10
    write_idx(labels_file, labels, mnist_data.LABELS_MAGIC)
    assert conversion_error(idx_dir) == (
        "%s: label 10 at index 5, expected 0..9" % labels_file
    )


def test_validation_size_must_leave_training_images(idx_dir):
    assert conversion_error(idx_dir, 30) == (
        "--validation_size=30, expected 0 to 29 (the training images less one)"
    )


def write_numbered_records(data_dir, num_examples):
    """A train split whose example i has pixels 0 and 1 = i % 256, i // 256.

    Every other pixel alternates between 0 and 255, so that the decoded
    range is exactly [-0.5, 0.5].
    """
    images = np.zeros((num_examples, 28, 28), np.uint8)
    images[:, 1:, ::2] = 255
    ids = np.arange(num_examples)
    images[:, 0, 0], images[:, 0, 1] = ids % 256, ids // 256
    os.makedirs(data_dir, exist_ok=True)
    filename = os.path.join(data_dir, "train.tfrecords")
    mnist_data.write_records(filename, images, ids % 10)
    return filename


def example_ids(images):
    pixels = np.round((images[:, :2] + 0.5) * 255).astype(int)
    return pixels[:, 0] + 256 * pixels[:, 1]


def read_inputs(data_dir, batch_size, num_epochs):
    """Runs `inputs` on the train split to its end; returns the batches.

    Returns:
      A list of (float32 [batch_size, 784], int32 [batch_size]) arrays.
    """
    with tf.Graph().as_default():
        images, labels = mnist_input.inputs(
            True, batch_size, num_epochs, data_dir=str(data_dir)
        )
        batches = []
        with tf.compat.v1.Session() as sess:
            with pytest.raises(tf.errors.OutOfRangeError):
                while True:
                    batches.append(sess.run([images, labels]))
    return batches


def test_inputs_are_float_batches_in_half_unit_range(tmp_path):
    write_numbered_records(str(tmp_path), 40)
    with tf.Graph().as_default():
        images, labels = mnist_input.inputs(True, 8, 1, str(tmp_path))
    assert images.dtype == tf.float32 and labels.dtype == tf.int32
    assert images.shape.as_list() == [8, 784]
    assert labels.shape.as_list() == [8]
    batches = read_inputs(tmp_path, 8, 1)
    all_images = np.concatenate([b[0] for b in batches])
    assert all_images.dtype == np.float32
    assert all_images.min() == -0.5 and all_images.max() == 0.5
    np.testing.assert_array_equal(
        np.concatenate([b[1] for b in batches]), example_ids(all_images) % 10
    )


def test_one_epoch_yields_every_record_once_shuffled_then_ends(tmp_path):
    write_numbered_records(str(tmp_path), 300)
    batches = read_inputs(tmp_path, 30, 1)
    ids = example_ids(np.concatenate([b[0] for b in batches]))
    assert len(batches) == 10
    assert sorted(ids) == list(range(300))
    assert list(ids) != list(range(300))


def test_each_epoch_yields_every_record_once_in_its_own_order(tmp_path):
    write_numbered_records(str(tmp_path), 300)
    batches = read_inputs(tmp_path, 30, 2)
    ids = example_ids(np.concatenate([b[0] for b in batches]))
    first, second = ids[:300].tolist(), ids[300:].tolist()
    assert sorted(first) == sorted(second) == list(range(300))
    assert first != second


def test_training_batches_drop_the_last_partial_batch(tmp_path):
    write_numbered_records(str(tmp_path), 100)
    batches = read_inputs(tmp_path, 40, 3)
    # floor(100 * 3 / 40) = 7 full batches; 20 examples are left out.
    assert [len(b[1]) for b in batches] == [40] * 7
    counts = np.bincount(example_ids(np.concatenate([b[0] for b in batches])))
    assert counts.max() == 3 and counts.sum() == 280


def test_a_missing_split_says_how_to_make_it(tmp_path):
    with pytest.raises(ValueError) as error:
        mnist_input.data_file(str(tmp_path), "test")
    assert str(error.value).startswith(
        "%s not found. Download the four IDX files from %s and run "
        "'python mnist_input.py --idx_dir=DIR --data_dir=%s', or pass "
        "--fake_data"
        % (tmp_path / "test.tfrecords", mnist_input.SOURCE_URL, tmp_path)
    )


def test_a_corrupt_record_is_reported_with_the_file_name(tmp_path):
    filename = write_numbered_records(str(tmp_path), 20)
    data = bytearray(open(filename, "rb").read())
    data[record_offset(data, 5) + 100] ^= 0xFF  # in the image of record 5
    open(filename, "wb").write(bytes(data))
    with tf.Graph().as_default():
        images, labels = mnist_input.inputs(
            train=True, batch_size=4, num_epochs=1, data_dir=str(tmp_path)
        )
        with tf.compat.v1.Session() as sess:
            with pytest.raises(ValueError) as error:
                with mnist_input.reading(filename):
                    sess.run(images)
    assert str(error.value) == (
        "%s is corrupt: a record fails its checksum or is cut short; make it "
        "again with mnist_input.py" % filename
    )


@pytest.mark.parametrize(
    "corrupt, found",
    [
        (
            lambda data, at: data.__setitem__(slice(at, at + 8), b"\xff" * 8),
            "its length field says 18446744073709551615 bytes",
        ),
        # Cut in the header: TensorFlow's reader takes it for the file's end.
        (
            lambda data, at: data.__delitem__(slice(at + 5, None)),
            "only 5 of its 12 header bytes are there",
        ),
    ],
    ids=["length", "cut_header"],
)
def test_a_record_framed_past_the_files_end_is_named_before_the_run(
    tmp_path, corrupt, found
):
    filename = write_numbered_records(str(tmp_path), 20)
    data = bytearray(open(filename, "rb").read())
    corrupt(data, record_offset(data, 5))
    open(filename, "wb").write(bytes(data))
    with pytest.raises(ValueError) as error:
        mnist_data.count_framed_records(filename)
    assert str(error.value) == (
        "%s, record 5 (from 0): %s, past the file's end at byte %d: the file "
        "is corrupt or cut short; make it again with mnist_input.py"
        % (filename, found, len(data))
    )


def test_a_file_cut_short_during_the_run_is_named_not_a_short_epoch(tmp_path):
    filename = write_numbered_records(str(tmp_path), 20)
    data = open(filename, "rb").read()
    with tf.Graph().as_default():
        images, _ = mnist_input.inputs(
            train=True, batch_size=4, num_epochs=3, data_dir=str(tmp_path)
        )
        # Cut in record 7's header, which TensorFlow's reader takes for the
        # file's end, after the run counted the records.
        open(filename, "wb").write(data[: record_offset(data, 7) + 5])
        with tf.compat.v1.Session() as sess:
            with pytest.raises(ValueError) as error:
                with mnist_input.reading(filename):
                    while True:
                        sess.run(images)
    assert str(error.value) == (
        "%s changed during the run: it held 20 records as the run started, "
        "and only 7 when read again; put it back (or make it again with "
        "mnist_input.py) and start the run again, which resumes from its "
        "newest checkpoint" % filename
    )


def test_sample_set_is_written_once_with_balanced_classes(tmp_path):
    assert mnist_data.write_fake_data(str(tmp_path))
    assert not mnist_data.write_fake_data(str(tmp_path))
    for split, size in mnist_data.FAKE_SPLIT_SIZES.items():
        _, labels = read_split(tmp_path, split)
        assert list(np.bincount(labels)) == [size // 10] * 10
    images, labels = mnist_data.fake_examples(20, seed=0)
    assert images.dtype == np.uint8 and images.shape == (20, 28, 28)
    # The strokes stand out of the noise: an 8 lights more than a 1.
    assert images[8].mean() > images[1].mean() + 20
