"""The public surface of the 2017 CIFAR-10 tutorial modules, call by call.

Scripts written against the tutorial's `cifar10` and `cifar10_input` (and
the TF1 MNIST reading example's `inputs`) run on ours with only
`import tensorflow.compat.v1 as tf`.
"""

import inspect
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from conftest import REPO, SCRIPT_ENV, write_cifar10_files
from helpers.cifar10_images import crop_views, standardize

import cifar10
import cifar10_input
import mnist_input
from data_sets import cifar10_batches, cifar10_data

TUTORIAL_FLAGS = ["batch_size", "data_dir", "use_fp16"]


def run_user_script(folder, name, text, *args):
    """Writes a user's script into folder and runs it from there.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    (folder / name).write_text(text)
    env = dict(SCRIPT_ENV, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, name, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=folder,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result


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


# A training script as users wrote them against the 2017 tutorial, with
# only the import changed: the tutorial's names, flags from cifar10, a
# MonitoredTrainingSession with hooks, tf.app.run.
TUTORIAL_STYLE_TRAIN = """
import tensorflow.compat.v1 as tf

import cifar10

FLAGS = tf.app.flags.FLAGS
tf.app.flags.DEFINE_string("train_dir", "/tmp/cifar10_train", "Checkpoints.")
tf.app.flags.DEFINE_integer("max_steps", 1000, "Steps to train.")


class LossPrinter(tf.train.SessionRunHook):
    def __init__(self, loss):
        self.loss = loss

    def before_run(self, run_context):
        return tf.train.SessionRunArgs([tf.train.get_global_step(), self.loss])

    def after_run(self, run_context, run_values):
        step, loss = run_values.results
        print("step %d, loss = %.2f" % (step + 1, loss))


def train():
    with tf.Graph().as_default():
        global_step = tf.train.get_or_create_global_step()
        with tf.device("/cpu:0"):
            images, labels = cifar10.distorted_inputs()
        print("images", images.shape.as_list(), "labels", labels.shape)
        logits = cifar10.inference(images)
        loss = cifar10.loss(logits, labels)
        train_op = cifar10.train(loss, global_step)
        hooks = [
            tf.train.StopAtStepHook(last_step=FLAGS.max_steps),
            tf.train.NanTensorHook(loss),
            LossPrinter(loss),
        ]
        with tf.train.MonitoredTrainingSession(
            checkpoint_dir=FLAGS.train_dir,
            hooks=hooks,
            config=tf.ConfigProto(log_device_placement=False),
        ) as sess:
            while not sess.should_stop():
                sess.run(train_op)


def main(argv=None):
    cifar10.maybe_download_and_extract()
    train()


if __name__ == "__main__":
    tf.app.run()
"""

# The matching eval script: the tutorial's inputs(eval_data), the shadow
# variables restored by name, queue runners started by hand; then records
# read through read_cifar10 on a FIFOQueue of file names, as the tutorial's
# input test reads them.
TUTORIAL_STYLE_EVAL = """
import math

import os

import numpy as np
import tensorflow.compat.v1 as tf

import cifar10
import cifar10_input

FLAGS = tf.app.flags.FLAGS
tf.app.flags.DEFINE_string("checkpoint_dir", "/tmp/cifar10_train", "")
tf.app.flags.DEFINE_integer("num_examples", 10000, "Examples to score.")


def evaluate():
    with tf.Graph().as_default():
        images, labels = cifar10.inputs(eval_data=True)
        logits = cifar10.inference(images)
        top_k_op = tf.nn.in_top_k(logits, labels, 1)
        averages = tf.train.ExponentialMovingAverage(
            cifar10.MOVING_AVERAGE_DECAY
        )
        saver = tf.train.Saver(averages.variables_to_restore())
        [weights] = tf.get_collection(
            tf.GraphKeys.GLOBAL_VARIABLES, "conv1/weights"
        )
        with tf.Session() as sess:
            state = tf.train.get_checkpoint_state(FLAGS.checkpoint_dir)
            saver.restore(sess, state.model_checkpoint_path)
            step = state.model_checkpoint_path.split("-")[-1]
            coord = tf.train.Coordinator()
            threads = tf.train.start_queue_runners(sess=sess, coord=coord)
            num_iter = int(math.ceil(FLAGS.num_examples / FLAGS.batch_size))
            hits = sum(np.sum(sess.run(top_k_op)) for _ in range(num_iter))
            coord.request_stop()
            coord.join(threads)
            total = num_iter * FLAGS.batch_size
            print("step %s: %d hits of %d" % (step, hits, total))
            print("conv1/weights sum %.6f" % np.sum(sess.run(weights)))


def print_first_records(count):
    filename = os.path.join(
        FLAGS.data_dir, "cifar-10-batches-bin", "test_batch.bin"
    )
    with tf.Graph().as_default():
        queue = tf.FIFOQueue(99, [tf.string], shapes=())
        record = cifar10_input.read_cifar10(queue)
        with tf.Session() as sess:
            sess.run(queue.enqueue([filename]))
            sess.run(queue.close())
            for _ in range(count):
                key, label = sess.run([record.key, record.label])
                print("%s %s" % (key.decode(), label.tolist()))


def main(argv=None):
    cifar10.maybe_download_and_extract()
    evaluate()
    print_first_records(3)


if __name__ == "__main__":
    tf.app.run()
"""


@pytest.fixture
def data_dir(tmp_path):
    """A --data_dir of 20 random records per file, in the binary format."""
    write_cifar10_files(tmp_path / "data", records_per_file=20)
    return tmp_path / "data"


@pytest.mark.slow
def test_a_tutorial_style_script_trains_and_its_eval_restores_the_averages(
    data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    flags_ = ["--data_dir=%s" % data_dir, "--batch_size=4"]
    trained = run_user_script(
        tmp_path,
        "my_cifar10_train.py",
        TUTORIAL_STYLE_TRAIN,
        *flags_,
        "--train_dir=%s" % train_dir,
        "--max_steps=3",
    )
    train_lines = trained.stdout.splitlines()
    # Each of the 8 deprecations of the queues (TensorFlow 2.21) once; its
    # logger printed each through its own handler and through absl's.
    deprecated = [
        line.split("From ", 1)[1]
        for line in trained.stderr.splitlines()
        if "is deprecated" in line
    ]
    assert len(deprecated) == len(set(deprecated)) == 8
    # --batch_size reached cifar10 from the user's command line.
    assert "images [4, 24, 24, 3] labels (4,)" in train_lines
    steps = [line.split(",")[0] for line in train_lines if "loss" in line]
    assert steps == ["step 1", "step 2", "step 3"]
    checkpoint = tf.train.load_checkpoint(str(train_dir))
    assert checkpoint.get_tensor("global_step") == 3

    eval_lines = run_user_script(
        tmp_path,
        "my_cifar10_eval.py",
        TUTORIAL_STYLE_EVAL,
        *flags_,
        "--checkpoint_dir=%s" % train_dir,
        "--num_examples=10",
    ).stdout.splitlines()
    # ceil(10 / 4) batches of 4 from the test file's 20 records.
    step_line, weights_line = eval_lines[-5:-3]
    hits = int(step_line.split(": ")[1].split()[0])
    assert step_line == "step 3: %d hits of 12" % hits
    # The eval's conv1/weights hold the checkpoint's moving average.
    shadow = checkpoint.get_tensor("conv1/weights/ExponentialMovingAverage")
    raw = checkpoint.get_tensor("conv1/weights")
    restored = float(weights_line.rsplit(" ", 1)[1])
    assert restored == pytest.approx(np.sum(shadow), abs=2e-6)
    assert abs(np.sum(shadow) - np.sum(raw)) > 1e-4
    assert hits == _top_1_hits(data_dir, train_dir, num_examples=12)
    # read_cifar10 on a FIFOQueue of file names: 'FILE:INDEX' keys, labels.
    test_file = data_dir / cifar10_input.BATCHES_DIR / "test_batch.bin"
    labels = np.fromfile(test_file, np.uint8)[:: cifar10_input.RECORD_BYTES]
    assert eval_lines[-3:] == [
        "%s:%d [%d]" % (test_file, i, labels[i]) for i in range(3)
    ]


def _top_1_hits(data_dir, train_dir, num_examples):
    """Top-1 hits of the newest checkpoint's moving averages, by our eval."""
    with tf.Graph().as_default():
        images, labels, init_op = cifar10_batches.eval_inputs(
            "test", str(data_dir), num_examples, num_examples
        )
        logits = cifar10.inference(images)
        top_1 = tf.nn.in_top_k(predictions=logits, targets=labels, k=1)
        saver = tf.compat.v1.train.Saver(cifar10.variables_to_restore())
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(str(train_dir)))
            sess.run(init_op)
            return int(np.sum(sess.run(top_1)))


# A multi-tower script in the tutorial's manner: towers named with
# cifar10.TOWER_NAME sharing one set of variables, the batch queue of the
# README (tf.contrib's prefetch_queue is gone), a plain Session with the
# queue runners started by hand, a Saver at the end.
TUTORIAL_STYLE_TOWERS = """
import tensorflow.compat.v1 as tf

import cifar10

FLAGS = tf.app.flags.FLAGS
tf.app.flags.DEFINE_string("train_dir", "/tmp/cifar10_train", "Checkpoints.")
tf.app.flags.DEFINE_integer("num_gpus", 2, "Towers.")
tf.app.flags.DEFINE_integer("max_steps", 3, "Steps to train.")


def tower_loss(scope, images, labels):
    cifar10.loss(cifar10.inference(images), labels)
    return tf.add_n(tf.get_collection("losses", scope), name="total_loss")


def mean_gradients(tower_grads):
    return [
        (tf.reduce_mean(tf.stack([g for g, _ in pairs]), 0), pairs[0][1])
        for pairs in zip(*tower_grads)
    ]


def train():
    with tf.Graph().as_default(), tf.device("/cpu:0"):
        global_step = tf.train.get_or_create_global_step()
        opt = tf.train.GradientDescentOptimizer(cifar10.INITIAL_LEARNING_RATE)
        images, labels = cifar10.distorted_inputs()
        batch_queue = tf.FIFOQueue(
            2 * FLAGS.num_gpus,
            [tf.float32, tf.int32],
            shapes=[images.shape, labels.shape],
        )
        tf.train.add_queue_runner(
            tf.train.QueueRunner(
                batch_queue, [batch_queue.enqueue([images, labels])]
            )
        )
        tower_grads = []
        with tf.variable_scope(tf.get_variable_scope()):
            for i in range(FLAGS.num_gpus):
                with tf.device("/gpu:%d" % i), tf.name_scope(
                    "%s_%d" % (cifar10.TOWER_NAME, i)
                ) as scope:
                    image_batch, label_batch = batch_queue.dequeue()
                    loss = tower_loss(scope, image_batch, label_batch)
                    tf.get_variable_scope().reuse_variables()
                    tower_grads.append(opt.compute_gradients(loss))
        apply_op = opt.apply_gradients(
            mean_gradients(tower_grads), global_step=global_step
        )
        averages = tf.train.ExponentialMovingAverage(
            cifar10.MOVING_AVERAGE_DECAY, global_step
        )
        train_op = tf.group(
            apply_op, averages.apply(tf.trainable_variables())
        )
        saver = tf.train.Saver(tf.global_variables())
        sess = tf.Session(config=tf.ConfigProto(allow_soft_placement=True))
        sess.run(tf.global_variables_initializer())
        tf.train.start_queue_runners(sess=sess)
        for _ in range(FLAGS.max_steps):
            sess.run(train_op)
        saver.save(sess, FLAGS.train_dir + "/model.ckpt", global_step)
        print("%d variables" % len(tf.trainable_variables()))


def main(argv=None):
    train()


if __name__ == "__main__":
    tf.app.run()
"""


@pytest.mark.slow
def test_a_tutorial_style_multi_tower_script_shares_one_set_of_variables(
    data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    lines = run_user_script(
        tmp_path,
        "my_cifar10_multi_gpu_train.py",
        TUTORIAL_STYLE_TOWERS,
        "--data_dir=%s" % data_dir,
        "--batch_size=4",
        "--train_dir=%s" % train_dir,
    ).stdout.splitlines()
    assert lines[-1] == "10 variables"
    checkpoint = tf.train.load_checkpoint(str(train_dir))
    assert checkpoint.get_tensor("global_step") == 3
    # Tower-free names, as in the tutorial's checkpoints and ours.
    names = sorted(checkpoint.get_variable_to_shape_map())
    assert [name for name in names if "tower" in name] == []
    assert "softmax_linear/weights/ExponentialMovingAverage" in names


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
