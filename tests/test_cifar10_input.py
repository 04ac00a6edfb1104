"""CIFAR-10 input: records on disk, the eval input, the training distortions."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import write_cifar10_files
from helpers.cifar10_images import crop_views, standardize
from tensorflow.python.autograph.impl import api as autograph_api

import cifar10_input
from data_sets import cifar10_batches, cifar10_data


def _run_to_end(tensors, init_op=None):
    """Evaluates tensors until the input ends; returns the list of results."""
    results = []
    with tf.compat.v1.Session() as sess:
        if init_op is not None:
            sess.run(init_op)
        try:
            while True:
                results.append(sess.run(tensors))
        except tf.errors.OutOfRangeError:
            return results


def test_records_are_written_depth_major_and_read_back_as_hwc(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (7, 32, 32, 3), np.uint8)
    labels = np.array([3, 1, 4, 1, 5, 9, 2])
    filename = str(tmp_path / "records.bin")
    cifar10_data.write_records(filename, images, labels)

    raw = np.fromfile(filename, np.uint8).reshape(7, 3073)
    assert raw[:, 0].tolist() == [3, 1, 4, 1, 5, 9, 2]
    # After the label: all red values row by row, then green, then blue.
    assert raw[2, 1 : 1 + 1024].tolist() == images[2, :, :, 0].ravel().tolist()
    assert raw[2, 1 + 2048 :].tolist() == images[2, :, :, 2].ravel().tolist()

    with tf.Graph().as_default():
        dataset = cifar10_input.read_records([filename])
        decoded = tf.compat.v1.data.make_one_shot_iterator(
            dataset.map(cifar10_input.decode_record)
        ).get_next()
        read_back = _run_to_end(decoded)
    np.testing.assert_array_equal([image for image, _ in read_back], images)
    assert [label for _, label in read_back] == [3, 1, 4, 1, 5, 9, 2]


def test_eval_input_yields_every_example_once_in_file_order(tmp_path):
    written = write_cifar10_files(tmp_path, records_per_file=11)
    images, labels = written["test_batch.bin"]
    with tf.Graph().as_default():
        batch_images, batch_labels, init_op = cifar10_batches.eval_inputs(
            "test", str(tmp_path), batch_size=4, num_examples=11
        )
        batches = _run_to_end([batch_images, batch_labels], init_op)

    assert [len(b_labels) for _, b_labels in batches] == [4, 4, 3]
    read_labels = np.concatenate([b_labels for _, b_labels in batches])
    assert read_labels.tolist() == labels.tolist()
    # The central 24x24 crop of each 32x32 image, standardised.
    expected = [standardize(image[4:28, 4:28]) for image in images]
    read_images = np.concatenate([b_images for b_images, _ in batches])
    np.testing.assert_allclose(read_images, expected, atol=1e-4)


def test_eval_input_stops_after_num_examples(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=11)
    with tf.Graph().as_default():
        _, labels, init_op = cifar10_batches.eval_inputs(
            "train", str(tmp_path), batch_size=4, num_examples=6
        )
        batches = _run_to_end(labels, init_op)
    # The first six records of data_batch_1.bin.
    assert np.concatenate(batches).tolist() == [0, 1, 2, 3, 4, 5]


def test_eval_input_refuses_more_examples_than_the_files_hold(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=11)
    with tf.Graph().as_default():
        with pytest.raises(ValueError) as error:
            cifar10_batches.eval_inputs(
                "test", str(tmp_path), batch_size=4, num_examples=12
            )
    assert str(error.value) == (
        "--num_examples=12 but the test files hold 11 records"
    )


def test_an_eval_file_cut_short_while_watched_is_one_line_naming_it(tmp_path):
    write_cifar10_files(tmp_path, records_per_file=11)
    test_file = tmp_path / "cifar-10-batches-bin" / "test_batch.bin"
    with tf.Graph().as_default():
        _, labels, init_op = cifar10_batches.eval_inputs(
            "test", str(tmp_path), batch_size=4, num_examples=11
        )
        # Cut as the eval waits for its next checkpoint.
        test_file.write_bytes(test_file.read_bytes()[:1000])
        with pytest.raises(ValueError) as error:
            with cifar10_batches.reading(str(tmp_path)):
                _run_to_end(labels, init_op)
    assert str(error.value) == (
        "the data changed while the eval watched (Excluding the header (0 "
        'bytes) and footer (0 bytes), input file "%s" has body length 1000 '
        "bytes, which is not an exact multiple of the record length (3073 "
        "bytes)); put --data_dir=%s back as it was, then run the eval again"
        % (test_file, tmp_path)
    )


@pytest.fixture(scope="module")
def gray_data_dir(tmp_path_factory):
    """Ten grey random images, labels 0..9, two per training file.

    Grey images have equal channel means, so random brightness and contrast
    cancel in the standardisation and a distorted image is exactly a
    standardised crop, possibly flipped, of its record.
    """
    data_dir = tmp_path_factory.mktemp("gray_cifar10")
    folder = data_dir / cifar10_input.BATCHES_DIR
    folder.mkdir()
    rng = np.random.default_rng(2)
    gray = rng.integers(0, 256, (10, 32, 32, 1), np.uint8)
    images = np.repeat(gray, 3, axis=3)
    for i, name in enumerate(cifar10_input.TRAIN_FILES):
        cifar10_data.write_records(
            str(folder / name), images[2 * i : 2 * i + 2], [2 * i, 2 * i + 1]
        )
    return data_dir, images


def _distorted_batches(data_dir, batch_size, num_batches, seed=None):
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(seed)
        images, labels = cifar10_batches.train_inputs(str(data_dir), batch_size)
        with tf.compat.v1.Session() as sess:
            return [sess.run([images, labels]) for _ in range(num_batches)]


def test_train_inputs_are_standardised_24x24x3_batches(gray_data_dir):
    data_dir, _ = gray_data_dir
    [(images, labels)] = _distorted_batches(data_dir, 10, 1)
    assert images.shape == (10, 24, 24, 3)
    assert images.dtype == np.float32
    assert labels.shape == (10,)
    assert labels.dtype == np.int32
    np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), 0.0, atol=1e-4)
    np.testing.assert_allclose(images.std(axis=(1, 2, 3)), 1.0, atol=1e-3)


def test_each_tower_reads_its_own_batch_from_one_shared_iterator(
    gray_data_dir,
):
    data_dir, _ = gray_data_dir
    with tf.Graph().as_default():
        get_next = cifar10_batches.distorted_batches(str(data_dir), 5)
        (first, first_labels), (second, second_labels) = get_next(), get_next()
        with tf.compat.v1.Session() as sess:
            values = sess.run([first, second])
    # Two reads of one iterator, as the towers of a trainer make them.
    assert first.op is not second.op
    assert first.op.inputs[0] is second.op.inputs[0]
    assert first_labels.shape.as_list() == second_labels.shape.as_list() == [5]
    # In one step the reads took different batches (random crops of random
    # grey images never coincide).
    assert not np.array_equal(values[0], values[1])


def test_crops_and_flips_vary_between_epochs(gray_data_dir):
    data_dir, images = gray_data_dir
    # Ten epochs of the ten records.
    batches = _distorted_batches(data_dir, 10, 10)
    views = [crop_views(image) for image in images]
    seen = {label: [] for label in range(10)}
    for batch_images, batch_labels in batches:
        for image, label in zip(batch_images, batch_labels):
            errors = {
                key: np.abs(image - view).max()
                for key, view in views[label].items()
            }
            key = min(errors, key=errors.get)
            # Every distorted image is one crop and flip of its own record.
            assert errors[key] < 1e-3
            seen[label].append(key)

    # 162 views each: about 10 draws repeating one view are a 1e-19 chance.
    assert min(len(set(keys)) for keys in seen.values()) >= 2
    all_keys = [key for keys in seen.values() for key in keys]
    assert {flipped for _, _, flipped in all_keys} == {False, True}
    # 100 draws of 81 offsets give about 57 distinct ones.
    assert len({(row, column) for row, column, _ in all_keys}) >= 30


# The graph seed makes the draws of the dataset's functions repeatable.
@pytest.mark.filterwarnings("ignore:Seed 5 from outer graph")
def test_each_image_of_a_batch_gets_its_own_crop_and_flip(gray_data_dir):
    data_dir, images = gray_data_dir
    views = [crop_views(image) for image in images]
    [(batch_images, batch_labels)] = _distorted_batches(data_dir, 10, 1, 5)
    keys = []
    for image, label in zip(batch_images, batch_labels):
        errors = {
            key: np.abs(image - view).max()
            for key, view in views[label].items()
        }
        keys.append(min(errors, key=errors.get))
        assert errors[keys[-1]] < 1e-3
    # One draw per batch would give one offset and one flip for all ten.
    assert len({(row, column) for row, column, _ in keys}) >= 5
    assert 1 <= sum(flipped for _, _, flipped in keys) <= 9


def test_the_input_functions_are_traced_as_written_without_autograph(
    tmp_path, monkeypatch
):
    write_cifar10_files(tmp_path, 10)
    converted, convert_actual = [], autograph_api._convert_actual

    def convert(entity, program_ctx):
        converted.append(entity.__name__)
        return convert_actual(entity, program_ctx)

    # Where autograph rewrites a function's source: 0.4 s of every
    # trainer's start, for the same ops.
    monkeypatch.setattr(autograph_api, "_convert_actual", convert)
    with tf.Graph().as_default():
        cifar10_batches.train_inputs(str(tmp_path), 4)
        cifar10_batches.eval_inputs("test", str(tmp_path), 5, 10)
    assert converted == []
