"""The public surface of the 2017 CIFAR-10 tutorial modules, call by call.

Scripts written against the tutorial's `cifar10` and `cifar10_input` (and
the TF1 MNIST reading example's `inputs`) run on ours with only
`import tensorflow.compat.v1 as tf`.
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from conftest import write_cifar10_files
from helpers.cifar10_images import crop_views, standardize
from helpers.scripts import run_user_script

import cifar10
import cifar10_input
import mnist_input
from data_sets import cifar10_data

TUTORIAL_FLAGS = ["batch_size", "data_dir", "use_fp16"]


def test_cifar10_defines_the_tutorials_three_flags_with_its_defaults():
    defaults = {name: flags.FLAGS[name].default for name in TUTORIAL_FLAGS}
    assert defaults == {
        "batch_size": 128,
        "data_dir": "/tmp/cifar10_data",
        "use_fp16": False,
    }
    assert {
        name: flags.FLAGS.find_module_defining_flag(name)
        for name in TUTORIAL_FLAGS
    } == dict.fromkeys(TUTORIAL_FLAGS, "cifar10")


# Imports the library modules and the three CIFAR-10 scripts into one
# process: no flag clashes, and each script's --help lists the tutorial's
# three flags (from cifar10) and the shared ones (from common_flags).
IMPORT_TOGETHER = """
from absl import flags
import cifar10, cifar10_input, mnist_input, mnist_model
import cifar10_train, cifar10_multi_gpu_train, cifar10_eval
FLAGS = flags.FLAGS
tutorial = {"batch_size", "data_dir", "use_fp16"}
for module in [cifar10_train, cifar10_multi_gpu_train, cifar10_eval]:
    keys = {flag.name for flag in FLAGS.get_key_flags_for_module(module)}
    print(module.__name__, sorted(keys & tutorial), "fake_data" in keys)
"""


def test_the_cifar10_scripts_import_together_and_adopt_the_tutorial_flags(
    tmp_path,
):
    result = run_user_script(tmp_path, "imports.py", IMPORT_TOGETHER)
    assert result.stdout.splitlines() == [
        "%s %s True" % (name, TUTORIAL_FLAGS)
        for name in [
            "cifar10_train",
            "cifar10_multi_gpu_train",
            "cifar10_eval",
        ]
    ]


def test_cifar10_has_the_tutorials_constants_and_values():
    assert {
        "IMAGE_SIZE": cifar10.IMAGE_SIZE,
        "NUM_CLASSES": cifar10.NUM_CLASSES,
        "TRAIN": cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
        "EVAL": cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_EVAL,
        "MOVING_AVERAGE_DECAY": cifar10.MOVING_AVERAGE_DECAY,
        "NUM_EPOCHS_PER_DECAY": cifar10.NUM_EPOCHS_PER_DECAY,
        "LEARNING_RATE_DECAY_FACTOR": cifar10.LEARNING_RATE_DECAY_FACTOR,
        "INITIAL_LEARNING_RATE": cifar10.INITIAL_LEARNING_RATE,
        "TOWER_NAME": cifar10.TOWER_NAME,
        "DATA_URL": cifar10.DATA_URL,
    } == {
        "IMAGE_SIZE": 24,
        "NUM_CLASSES": 10,
        "TRAIN": 50000,
        "EVAL": 10000,
        "MOVING_AVERAGE_DECAY": 0.9999,
        "NUM_EPOCHS_PER_DECAY": 350.0,
        "LEARNING_RATE_DECAY_FACTOR": 0.1,
        "INITIAL_LEARNING_RATE": 0.1,
        "TOWER_NAME": "tower",
        "DATA_URL": "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    }
    assert [
        cifar10_input.IMAGE_SIZE,
        cifar10_input.NUM_CLASSES,
        cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
        cifar10_input.NUM_EXAMPLES_PER_EPOCH_FOR_EVAL,
    ] == [24, 10, 50000, 10000]


def _parameters(function):
    return [
        str(parameter)
        for parameter in inspect.signature(function).parameters.values()
    ]


def test_the_tutorial_calls_keep_their_signatures():
    assert {
        "cifar10.distorted_inputs": _parameters(cifar10.distorted_inputs),
        "cifar10.inputs": _parameters(cifar10.inputs),
        "cifar10.maybe_download_and_extract": _parameters(
            cifar10.maybe_download_and_extract
        ),
        "cifar10_input.read_cifar10": _parameters(cifar10_input.read_cifar10),
        "cifar10_input.distorted_inputs": _parameters(
            cifar10_input.distorted_inputs
        ),
        "cifar10_input.inputs": _parameters(cifar10_input.inputs),
        "mnist_input.inputs": _parameters(mnist_input.inputs),
    } == {
        "cifar10.distorted_inputs": [],
        "cifar10.inputs": ["eval_data"],
        "cifar10.maybe_download_and_extract": [],
        "cifar10_input.read_cifar10": ["filename_queue"],
        "cifar10_input.distorted_inputs": ["data_dir", "batch_size"],
        "cifar10_input.inputs": ["eval_data", "data_dir", "batch_size"],
        "mnist_input.inputs": [
            "train",
            "batch_size",
            "num_epochs",
            "data_dir='/tmp/mnist_data'",
        ],
    }
    # Our extras come after the tutorial's arguments, with defaults.
    assert _parameters(cifar10.inference)[0] == "images"
    assert _parameters(cifar10.loss) == ["logits", "labels"]
    assert _parameters(cifar10.train)[:2] == ["total_loss", "global_step"]
    extras = _parameters(cifar10.inference)[1:] + _parameters(cifar10.train)[2:]
    assert [extra.split("=")[0] for extra in extras] == [
        "is_training",
        "batch_size",
        "clip_norm",
        "loss_scaling",
        "learning_rate_fn",
        "optimizer_fn",
    ]
    assert all("=" in extra for extra in extras)


def test_read_cifar10_reads_the_records_of_a_fifo_queue_of_file_names(
    tmp_path,
):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (5, 32, 32, 3), np.uint8)
    labels = [7, 0, 9, 3, 5]
    filenames = [str(tmp_path / "a.bin"), str(tmp_path / "b.bin")]
    cifar10_data.write_records(filenames[0], images[:3], labels[:3])
    cifar10_data.write_records(filenames[1], images[3:], labels[3:])
    keys = ["%s:%d" % (filenames[0], i) for i in range(3)]
    keys += ["%s:%d" % (filenames[1], i) for i in range(2)]
    with tf.Graph().as_default():
        queue = tf.compat.v1.FIFOQueue(99, [tf.string], shapes=())
        record = cifar10_input.read_cifar10(queue)
        with tf.compat.v1.Session() as sess:
            sess.run(queue.enqueue_many([filenames]))
            sess.run(queue.close())
            read = [
                sess.run([record.key, record.label, record.uint8image])
                for _ in range(5)
            ]
            with pytest.raises(tf.errors.OutOfRangeError):
                sess.run(record.key)
    assert (record.height, record.width, record.depth) == (32, 32, 3)
    assert [key.decode() for key, _, _ in read] == keys
    assert [label.tolist() for _, label, _ in read] == [[x] for x in labels]
    assert record.label.dtype == tf.int32
    np.testing.assert_array_equal([image for _, _, image in read], images)


def _run_queue_batches(tensors, num_batches):
    """Evaluates tensors num_batches times with the queue runners started."""
    with tf.compat.v1.train.MonitoredSession() as sess:
        return [sess.run(tensors) for _ in range(num_batches)]


def test_tutorial_distorted_inputs_are_crops_and_flips_of_their_records(
    tmp_path,
):
    # Grey images: brightness and contrast cancel in the standardisation,
    # so each distorted image is exactly a standardised crop of its record.
    rng = np.random.default_rng(4)
    images = np.repeat(rng.integers(0, 256, (10, 32, 32, 1), np.uint8), 3, 3)
    for i, name in enumerate(cifar10_input.TRAIN_FILES):
        pair = slice(2 * i, 2 * i + 2)
        cifar10_data.write_records(
            str(tmp_path / name), images[pair], np.arange(10)[pair]
        )
    with tf.Graph().as_default():
        tensors = cifar10_input.distorted_inputs(str(tmp_path), 6)
        assert [t.shape.as_list() for t in tensors] == [[6, 24, 24, 3], [6]]
        assert [t.dtype for t in tensors] == [tf.float32, tf.int32]
        batches = _run_queue_batches(tensors, 3)
    views = [crop_views(image) for image in images]
    for batch_images, batch_labels in batches:
        for image, label in zip(batch_images, batch_labels):
            errors = [np.abs(image - v).max() for v in views[label].values()]
            assert min(errors) < 1e-3


def test_tutorial_inputs_read_the_test_file_in_order_when_eval_data_is_true(
    tmp_path,
):
    written = write_cifar10_files(tmp_path, records_per_file=6)
    folder = str(tmp_path / cifar10_input.BATCHES_DIR)
    with tf.Graph().as_default():
        test_tensors = cifar10_input.inputs(True, folder, 4)
        train_tensors = cifar10_input.inputs(False, folder, 4)
        test_batches = _run_queue_batches(test_tensors, 3)
        train_batches = _run_queue_batches(train_tensors, 2)
    images, labels = written["test_batch.bin"]
    # Three batches of four: the six records twice, in file order.
    read_labels = np.concatenate([b_labels for _, b_labels in test_batches])
    assert read_labels.tolist() == labels.tolist() * 2
    expected = [standardize(image[4:28, 4:28]) for image in images]
    read_images = np.concatenate([b_images for b_images, _ in test_batches])
    np.testing.assert_allclose(read_images, expected * 2, atol=1e-4)
    # False reads data_batch_1.bin, then data_batch_2.bin.
    train_labels = np.concatenate([b_labels for _, b_labels in train_batches])
    assert train_labels.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


def test_tutorial_inputs_refuse_our_string_eval_data(tmp_path):
    with pytest.raises(ValueError) as error:
        cifar10_input.inputs("train", str(tmp_path), 4)
    assert str(error.value) == (
        "eval_data is a bool (True reads test_batch.bin), got 'train'"
    )


def test_tutorial_inputs_name_a_missing_file(tmp_path):
    with tf.Graph().as_default(), pytest.raises(ValueError) as error:
        cifar10_input.distorted_inputs(str(tmp_path), 4)
    assert str(error.value).startswith(
        "CIFAR-10 files missing in %s: data_batch_1.bin, data_batch_2.bin"
        % tmp_path
    )


def test_inference_computes_in_the_dtype_of_float16_images():
    # The tutorial's inputs give float16 images with --use_fp16.
    with tf.Graph().as_default() as graph:
        logits = cifar10.inference(tf.zeros([2, 24, 24, 3], tf.float16))
    convolutions = [op for op in graph.get_operations() if op.type == "Conv2D"]
    assert [op.get_attr("T") for op in convolutions] == [tf.float16] * 2
    assert logits.dtype == tf.float32
    assert {v.dtype.base_dtype for v in graph.get_collection("variables")} == {
        tf.float32
    }
