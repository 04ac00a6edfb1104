"""CIFAR-10 training input: the tutorial's distortions, drawn per image.

The distortions are drawn by `distortion_parameters` and applied to whole
batches by the pure `distort_batch`; these tests check the draws against
the tutorial's distributions, the batched arithmetic against the
tutorial's per-image `tf.image` ops, and the epochs of `distorted_inputs`.
"""

import numpy as np
import pytest
import tensorflow as tf

import cifar10_input
from data_sets import cifar10_batches, cifar10_data

DRAWS = 9000  # Parameter draws per test: 1,000 per crop offset.
SEED = 17
# Chi-square critical values at p = 0.001 (tables), by degrees of freedom:
# 9 offsets - 1, 9 x 9 offset pairs - 1, 10 bins - 1.
CHI2_CRITICAL = {8: 26.125, 80: 124.839, 9: 27.877}


def _chi_square(counts):
    """Pearson's statistic of counts against equal expected counts."""
    counts = np.asarray(counts, np.float64)
    expected = counts.sum() / counts.size
    return ((counts - expected) ** 2 / expected).sum()


@pytest.fixture(scope="module")
def draws():
    """DRAWS parameter draws with a fixed graph seed, as numpy arrays."""
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(SEED)
        parameters = cifar10_input.distortion_parameters(DRAWS)
        with tf.compat.v1.Session() as sess:
            offsets, flips, brightness, contrast = sess.run(parameters)
    return {
        "offsets": offsets,
        "flips": flips,
        "brightness": brightness,
        "contrast": contrast,
    }


def test_crop_offsets_cover_0_to_8_uniformly_in_each_axis_and_jointly(draws):
    offsets = draws["offsets"]
    assert offsets.shape == (DRAWS, 2)
    assert offsets.dtype == np.int32
    assert offsets.min() == 0 and offsets.max() == 8
    for axis in (0, 1):
        counts = np.bincount(offsets[:, axis], minlength=9)
        assert counts.size == 9
        assert _chi_square(counts) < CHI2_CRITICAL[8]
    # Rows and columns drawn independently: all 81 pairs equally often.
    pairs = np.bincount(offsets[:, 0] * 9 + offsets[:, 1], minlength=81)
    assert _chi_square(pairs) < CHI2_CRITICAL[80]


def test_about_half_of_the_crops_are_flipped(draws):
    flips = draws["flips"]
    assert flips.dtype == np.bool_
    # Four standard deviations of a binomial(9000, 0.5) fraction: 0.021.
    assert abs(flips.mean() - 0.5) < 4 * np.sqrt(0.25 / DRAWS)


@pytest.mark.parametrize(
    "name, low, high",
    [("brightness", -63.0, 63.0), ("contrast", 0.2, 1.8)],
)
def test_brightness_and_contrast_spread_uniformly_over_their_range(
    draws, name, low, high
):
    values = draws[name].astype(np.float64)
    assert values.min() >= low and values.max() <= high
    # The range is used to its ends, not a narrower one.
    width = high - low
    assert values.min() < low + 0.01 * width
    assert values.max() > high - 0.01 * width
    # Uniform: ten equal bins about equally full, stddev width / sqrt(12).
    counts, _ = np.histogram(values, bins=10, range=(low, high))
    assert _chi_square(counts) < CHI2_CRITICAL[9]
    assert abs(values.std() / (width / np.sqrt(12)) - 1) < 0.03


def _tutorial_distortion(image, offset, flip, brightness, contrast):
    """The tutorial's distortion of one image with given parameters."""
    size = cifar10_input.IMAGE_SIZE
    image = tf.cast(image, tf.float32)
    image = tf.image.crop_to_bounding_box(image, *offset, size, size)
    if flip:
        image = tf.image.flip_left_right(image)
    image = tf.image.adjust_brightness(image, brightness)
    image = tf.image.adjust_contrast(image, contrast)
    return tf.image.per_image_standardization(image)


def test_a_batch_with_fixed_distortions_equals_the_per_image_ops_to_1e_5():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (12, 32, 32, 3), np.uint8)
    # The ends of every range, and values between.
    offsets = np.array(
        [[0, 0], [8, 8], [0, 8], [8, 0], [3, 5], [7, 1]] * 2, np.int32
    )
    flips = np.array([False, True, True, False, True, False] * 2)
    brightness = np.linspace(-63, 63, 12).astype(np.float32)
    contrast = np.linspace(0.2, 1.8, 12)[::-1].astype(np.float32)
    with tf.Graph().as_default():
        batch = cifar10_input.distort_batch(
            tf.constant(images), offsets, flips, brightness, contrast
        )
        one_by_one = tf.stack(
            [
                _tutorial_distortion(*each)
                for each in zip(images, offsets, flips, brightness, contrast)
            ]
        )
        with tf.compat.v1.Session() as sess:
            batch, one_by_one = sess.run([batch, one_by_one])
    assert batch.shape == (12, 24, 24, 3)
    assert np.abs(batch - one_by_one).max() < 1e-5
    # The parameters matter: the first two images' crops differ a lot.
    assert np.abs(one_by_one[0] - one_by_one[1]).max() > 1.0


def test_a_batch_of_records_decodes_as_each_record_alone(tmp_path):
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (5, 32, 32, 3), np.uint8)
    filename = str(tmp_path / "records.bin")
    cifar10_data.write_records(filename, images, [9, 0, 4, 4, 1])
    with tf.Graph().as_default():
        records = tf.compat.v1.data.make_one_shot_iterator(
            cifar10_input.read_records([filename]).batch(5)
        ).get_next()
        batch = cifar10_input.decode_record(records)
        alone = [cifar10_input.decode_record(records[i]) for i in range(5)]
        with tf.compat.v1.Session() as sess:
            (batch_images, batch_labels), alone = sess.run([batch, alone])
    assert batch_images.shape == (5, 32, 32, 3)
    np.testing.assert_array_equal(batch_images, images)
    assert batch_labels.tolist() == [9, 0, 4, 4, 1]
    np.testing.assert_array_equal([image for image, _ in alone], images)
    assert [label for _, label in alone] == [9, 0, 4, 4, 1]


# The epoch test's records: each image has three constant channels (0,
# 5 * i, 255), which crops, flips, brightness and contrast leave constant;
# standardised, its green value identifies record i.
RECORDS_PER_FILE = 10
NUM_RECORDS = RECORDS_PER_FILE * len(cifar10_input.TRAIN_FILES)


def _identity_images():
    """uint8 [50, 32, 32, 3] images and the standardised green of each."""
    channels = np.stack(
        [
            np.zeros(NUM_RECORDS),
            5.0 * np.arange(NUM_RECORDS),
            np.full(NUM_RECORDS, 255.0),
        ],
        axis=1,
    )  # [50, 3]
    means = channels.mean(axis=1, keepdims=True)
    greens = (channels[:, 1] - means[:, 0]) / channels.std(axis=1)
    images = np.broadcast_to(
        channels[:, None, None, :], (NUM_RECORDS, 32, 32, 3)
    )
    return images.astype(np.uint8), greens


# Batches of 10 end with the epochs of 50 records; batches of 15 straddle
# the ends of epochs, where one epoch's last records and the next one's
# first share a batch.
@pytest.mark.parametrize("batch_size", [10, 15])
def test_every_training_example_appears_once_per_epoch(tmp_path, batch_size):
    images, greens = _identity_images()
    folder = tmp_path / cifar10_input.BATCHES_DIR
    folder.mkdir()
    for i, name in enumerate(cifar10_input.TRAIN_FILES):
        part = slice(i * RECORDS_PER_FILE, (i + 1) * RECORDS_PER_FILE)
        cifar10_data.write_records(
            str(folder / name), images[part], np.arange(NUM_RECORDS)[part] % 10
        )
    with tf.Graph().as_default():
        batch_images, batch_labels = cifar10_batches.train_inputs(
            str(tmp_path), batch_size
        )
        with tf.compat.v1.Session() as sess:
            # Three epochs of 50 records.
            batches = [
                sess.run([batch_images, batch_labels])
                for _ in range(3 * NUM_RECORDS // batch_size)
            ]
    read = np.concatenate([b for b, _ in batches])  # [150, 24, 24, 3]
    labels = np.concatenate([b for _, b in batches])
    # Each image is one record's standardised constant channels.
    assert np.ptp(read, axis=(1, 2)).max() < 1e-4
    errors = np.abs(read[:, 0, 0, 1][:, None] - greens[None, :])
    ids = errors.argmin(axis=1)
    assert errors.min(axis=1).max() < 1e-3
    assert (labels == ids % 10).all()
    epochs = ids.reshape(3, NUM_RECORDS)
    for epoch in epochs:
        assert sorted(epoch) == list(range(NUM_RECORDS))
    # Shuffled, and anew each epoch.
    assert epochs[0].tolist() != list(range(NUM_RECORDS))
    assert epochs[0].tolist() != epochs[1].tolist() != epochs[2].tolist()
