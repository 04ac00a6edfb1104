"""A cluster of workers only, lost: the chief saves its last completed step.

Every worker holds its own copies of the variables, equal after every step.
When a peer, or the link to it, is lost, the step in flight fails in one
of its collectives before any saved variable is written (the update waits
for every collective of the step, `gradient_reduction.all_or_none`), so the
chief's variables are still those of the last step it completed: it saves
them, and the same commands resume from that step once the cluster is
whole again. Without this a link that goes down costs every step since the
last periodic checkpoint (up to --save_checkpoint_steps).
"""

import os

import tensorflow as tf

from multigpu.train_dir import checkpoints


def save_reached(server, config, saver, train_dir):
    """Saves the chief's variables at its global step, unless saved already.

    The session talks to the chief's own server only (config's device
    filters), so it waits on no lost peer; config's operation timeout
    bounds it.

    Args:
      server: the chief's `tf.distribute.Server`.
      config: the session's `ConfigProto` (`cluster.task_config`).
      saver: the run's `Saver` (its scaffold's).
      train_dir: str.

    Returns:
      str, the checkpoint of the chief's global step (train_dir's newest
      when it is of that step already), or None when it could not be
      written (the error is the run's, not this save's).
    """
    global_step = tf.compat.v1.train.get_global_step()
    try:
        with tf.compat.v1.Session(server.target, config=config) as sess:
            step = int(sess.run(global_step))
            newest = checkpoints.latest_checkpoint(train_dir)
            if newest and checkpoints.global_step(newest) == step:
                return newest
            path = os.path.join(train_dir, checkpoints.CHECKPOINT_BASENAME)
            return saver.save(sess, path, global_step=step)
    except tf.errors.OpError:
        return None
