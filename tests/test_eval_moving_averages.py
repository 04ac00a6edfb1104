"""The eval scores the moving averages, batch norm on its moving statistics.

A ResNet-20 checkpoint written by the test, whose weights and statistics
differ from their moving averages: the eval's precision @ 1 is 1.000 on
labels that are the argmax of the logits computed here with the averages
and batch norm in inference mode, where the raw weights, or batch norm on
the batch's statistics, hit at most half of them.
"""

import collections

import numpy as np
import tensorflow as tf
from conftest import SHADOW, run_script

import cifar10_input
from cifar10_models import registry
from data_sets import cifar10_batches, cifar10_data
from multigpu.train_dir import checkpoints

EXAMPLES = 20
# The checkpoint's global step.
STEP = 7
RESNET20 = registry.model("resnet20")


def _draw(name, shape, rng):
    """A value of a ResNet-20 variable, by its kind: He-normal kernels;
    gamma and the moving variance in [0.5, 2]; beta, the moving mean and
    fc's bias about 0."""
    if name.endswith("/kernel"):
        return rng.normal(0, np.sqrt(2 / np.prod(shape[:-1])), shape)
    if name.endswith(("/gamma", "/moving_variance")):
        return rng.uniform(0.5, 2.0, shape)
    return rng.normal(0, 0.5, shape)


# ResNet-20 on the eval's input: logits float32 [EXAMPLES, 10]; pooled,
# float32 [EXAMPLES, 64], the input of its last layer (fc); init_op, which
# rewinds the input; model, dict checkpoint name -> variable; feeds, dict
# checkpoint name -> the placeholder of the value that load assigns.
Resnet = collections.namedtuple(
    "Resnet", "logits pooled init_op model feeds load"
)


def _resnet20(data_dir, is_training):
    """A `Resnet` in the default graph."""
    images, _, init_op = cifar10_batches.eval_inputs(
        "test", str(data_dir), EXAMPLES, EXAMPLES
    )
    logits = registry.logits(RESNET20, images, is_training, tf.float32)
    (fc,) = [
        op
        for op in tf.compat.v1.get_default_graph().get_operations()
        if op.type == "MatMul"
    ]
    model = {
        checkpoints.saved_name(v): v for v in tf.compat.v1.global_variables()
    }
    feeds = {
        name: tf.compat.v1.placeholder(var.dtype, var.shape)
        for name, var in model.items()
    }
    load = tf.group(*[var.assign(feeds[name]) for name, var in model.items()])
    return Resnet(logits, fc.inputs[0], init_op, model, feeds, load)


def _run(sess, resnet, fetch, values, suffix):
    """fetch on the whole input, each variable of the model set to
    values[its checkpoint name + suffix]."""
    sess.run(
        resnet.load,
        {
            placeholder: values[name + suffix]
            for name, placeholder in resnet.feeds.items()
        },
    )
    sess.run(resnet.init_op)
    return sess.run(fetch)


def _save_and_score(data_dir, train_dir):
    """Writes a ResNet-20 checkpoint of step STEP whose variables and their
    moving averages are drawn apart; computes the eval input's logits.

    fc's averaged bias centres the averaged logits (their mean over the
    examples is 0), so that each example's top class is its own, not one
    class that a random network's mean features favour.

    Returns:
      values: dict checkpoint name -> value of each variable and shadow.
      averaged, raw: float32 [EXAMPLES, 10], the logits with batch norm in
        inference mode, every variable set to its shadow's value; to its
        own.
    """
    rng = np.random.default_rng(0)
    with tf.Graph().as_default():
        resnet = _resnet20(data_dir, False)
        model = resnet.model
        values = {}
        for name, var in model.items():
            for saved in (name, name + SHADOW):
                shape = var.shape.as_list()
                values[saved] = _draw(name, shape, rng).astype(np.float32)
        shadows = {
            name + SHADOW: tf.compat.v1.Variable(values[name + SHADOW])
            for name in model
        }
        step = tf.compat.v1.Variable(np.int64(STEP))
        saver = tf.compat.v1.train.Saver(
            {**model, **shadows, "global_step": step}
        )
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            pooled = _run(sess, resnet, resnet.pooled, values, SHADOW)
            mean = np.mean(pooled, axis=0)
            bias = "fc/bias" + SHADOW
            values[bias] = -mean @ values["fc/kernel" + SHADOW]
            shadows[bias].load(values[bias], sess)
            averaged = _run(sess, resnet, resnet.logits, values, SHADOW)
            raw = _run(sess, resnet, resnet.logits, values, "")
            saver.save(sess, str(train_dir / "model.ckpt"), STEP)
    return values, averaged, raw


def _training_mode_logits(data_dir, values):
    """The eval input's logits with batch norm on each batch's statistics,
    every variable set to its shadow's value: float32 [EXAMPLES, 10]."""
    with tf.Graph().as_default():
        resnet = _resnet20(data_dir, True)
        with tf.compat.v1.Session() as sess:
            return _run(sess, resnet, resnet.logits, values, SHADOW)


def test_the_eval_scores_the_averages_with_batch_norm_on_moving_statistics(
    tmp_path,
):
    data_dir, train_dir = tmp_path / "data", tmp_path / "train"
    test_file = data_dir / cifar10_input.BATCHES_DIR / "test_batch.bin"
    test_file.parent.mkdir(parents=True)
    train_dir.mkdir()
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (EXAMPLES, 32, 32, 3), np.uint8)
    # The labels come from the logits of these images: zeros until then.
    cifar10_data.write_records(str(test_file), images, [0] * EXAMPLES)
    values, averaged, raw = _save_and_score(data_dir, train_dir)
    labels = np.argmax(averaged, axis=1)
    # Many classes, each top one ahead by far more than float32's rounding.
    assert len(set(labels)) >= 5
    top_two = np.sort(averaged, axis=1)[:, -2:]
    gaps = top_two[:, 1] - top_two[:, 0]
    assert np.min(gaps) > 1e-4 * np.max(np.abs(averaged))
    cifar10_data.write_records(str(test_file), images, labels)
    # What the eval would score with the raw weights, or in training mode.
    for wrong in (raw, _training_mode_logits(data_dir, values)):
        assert np.sum(np.argmax(wrong, axis=1) == labels) <= EXAMPLES // 2

    result = run_script(
        "cifar10_eval.py",
        "--run_once",
        "--model=resnet20",
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--data_dir=%s" % data_dir,
        "--num_examples=%d" % EXAMPLES,
        "--batch_size=%d" % EXAMPLES,
    )
    assert ": precision @ 1 = 1.000" in result.stdout
