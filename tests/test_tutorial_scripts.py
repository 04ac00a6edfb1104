"""Scripts written against the 2017 tutorial run on the suite unchanged.

Each is a user's file in the tutorial's manner, run as a subprocess.
"""

import numpy as np
import pytest
import tensorflow as tf
from helpers.scripts import run_user_script
from helpers.tutorial_checkpoints import top_1_hits

import cifar10_input

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
            print("conv1/weights sum %r" % float(np.sum(sess.run(weights))))


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


@pytest.mark.slow
def test_a_tutorial_style_script_trains_and_its_eval_restores_the_averages(
    twenty_records_dir, tmp_path
):
    train_dir = tmp_path / "train"
    flags_ = ["--data_dir=%s" % twenty_records_dir, "--batch_size=4"]
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
    # The sums of the same float32 values in the same order are equal to
    # the bit; the moving average's differs from the raw weights'.
    assert restored == float(np.sum(shadow)) != float(np.sum(raw))
    assert hits == top_1_hits(twenty_records_dir, train_dir, num_examples=12)
    # read_cifar10 on a FIFOQueue of file names: 'FILE:INDEX' keys, labels.
    test_file = (
        twenty_records_dir / cifar10_input.BATCHES_DIR / "test_batch.bin"
    )
    labels = np.fromfile(test_file, np.uint8)[:: cifar10_input.RECORD_BYTES]
    assert eval_lines[-3:] == [
        "%s:%d [%d]" % (test_file, i, labels[i]) for i in range(3)
    ]


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
    twenty_records_dir, tmp_path
):
    train_dir = tmp_path / "train"
    lines = run_user_script(
        tmp_path,
        "my_cifar10_multi_gpu_train.py",
        TUTORIAL_STYLE_TOWERS,
        "--data_dir=%s" % twenty_records_dir,
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
