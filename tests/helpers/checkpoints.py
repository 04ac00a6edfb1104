"""Reading checkpoints: their steps, their values, their eval scores."""

import glob
import os
import shutil

import numpy as np


def checkpoint_steps(train_dir):
    """The global steps of the checkpoints listed in train_dir, oldest first."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(train_dir))
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


# The checkpoint's name of a variable's moving average: its own + this.
SHADOW = "/ExponentialMovingAverage"


def assert_values_kept(source, started, names, fresh=()):
    """started holds source's value of each of names, but of those in fresh.

    Args:
      source, started: dict name -> array, e.g. of two checkpoints.
      names: the names to compare.
      fresh: the names whose value must differ from source's (started anew).
    """
    for name in names:
        if name in fresh:
            assert not np.allclose(started[name], source[name]), name
        else:
            np.testing.assert_array_equal(started[name], source[name], name)


def eval_scores_in_numpy(
    checkpoint, data_dir, model_name, examples, batch_size
):
    """Precision @ 1 and recall @ 5 of a checkpoint, counted in NumPy.

    The model's logits on the first `examples` test examples, with every
    variable set to the moving average (shadow) the checkpoint holds for it;
    a label is among the top k when fewer than k logits exceed its own
    (TensorFlow's in_top_k counts ties as hits).

    Returns:
      (float, float), precision @ 1 and recall @ 5.
    """
    import tensorflow as tf

    from cifar10_models import registry
    from data_sets import cifar10_batches
    from multigpu.train_dir import checkpoints

    reader = tf.train.load_checkpoint(checkpoint)
    with tf.Graph().as_default():
        images, labels, init_op = cifar10_batches.eval_inputs(
            "test", str(data_dir), batch_size, examples
        )
        logits = registry.logits(
            registry.model(model_name), images, False, tf.float32
        )
        shadows = [
            variable.assign(
                reader.get_tensor(checkpoints.saved_name(variable) + SHADOW)
            )
            for variable in tf.compat.v1.global_variables()
        ]
        with tf.compat.v1.Session() as sess:
            sess.run([init_op, shadows])
            batches = [
                sess.run([logits, labels])
                for _ in range(examples // batch_size)
            ]
    all_logits = np.concatenate([batch[0] for batch in batches])
    all_labels = np.concatenate([batch[1] for batch in batches])
    own = all_logits[np.arange(examples), all_labels]
    above = np.sum(all_logits > own[:, np.newaxis], axis=1)
    return np.mean(above < 1), np.mean(above < 5)


def truncate_checkpoint(checkpoint):
    """Cuts the largest data file of a checkpoint to half its size."""
    data = max(glob.glob(checkpoint + ".data-*"), key=os.path.getsize)
    os.truncate(data, os.path.getsize(data) // 2)


def copy_checkpoints(train_dir, copy_dir):
    """Copies the checkpoints of train_dir; the state file names the copies.

    Returns:
      list of int, the steps of the copies, oldest first.
    """
    import tensorflow as tf

    os.makedirs(copy_dir)
    for path in glob.glob(os.path.join(str(train_dir), "model.ckpt-*")):
        shutil.copy(path, str(copy_dir))
    steps = checkpoint_steps(train_dir)
    names = ["model.ckpt-%d" % step for step in steps]
    tf.compat.v1.train.update_checkpoint_state(str(copy_dir), names[-1], names)
    return steps
