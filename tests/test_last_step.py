"""A lost cluster of workers only: the chief saves the last step it completed.

`sessions.save_reached` on a gRPC server of this process (127.0.0.1): the
chief's variables after a step that no checkpoint holds yet are saved at
that step, not left to an older checkpoint.
"""

import numpy as np
import tensorflow as tf
from conftest import checkpoint_steps, free_port

from multigpu.distributed import sessions
from multigpu.graph import placement

# The periodic checkpoint's step, then the step the chief completed.
SAVED_STEP, REACHED_STEP = 3, 5


def test_the_chief_of_a_lost_cluster_saves_its_last_step_not_an_older_one(
    tmp_path,
):
    server = tf.distribute.Server(
        {"worker": ["127.0.0.1:%d" % free_port()]}, "worker", 0
    )
    config = placement.session_config(operation_timeout_secs=60)
    with tf.Graph().as_default():
        global_step = tf.compat.v1.train.get_or_create_global_step()
        weights = tf.compat.v1.get_variable("weights", initializer=[1.0, 2.0])
        saver = tf.compat.v1.train.Saver()
        # The values live on the server, past the session that set them.
        with tf.compat.v1.Session(server.target, config=config) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "model.ckpt"), SAVED_STEP)
            global_step.load(REACHED_STEP, sess)
            weights.load([7.0, 8.0], sess)
        saved = sessions.save_reached(server, config, saver, str(tmp_path))
        again = sessions.save_reached(server, config, saver, str(tmp_path))

    assert saved == str(tmp_path / ("model.ckpt-%d" % REACHED_STEP))
    reader = tf.train.load_checkpoint(saved)
    assert reader.get_tensor("global_step") == REACHED_STEP
    np.testing.assert_array_equal(reader.get_tensor("weights"), [7.0, 8.0])
    # Saved already: the same checkpoint.
    assert again == saved
    assert checkpoint_steps(tmp_path) == [SAVED_STEP, REACHED_STEP]
