"""A ps counts every worker's done token, however its looks fall.

A ps serves until each worker's token has come through its done queue
(`ps.DoneTokens`); a token lost keeps it waiting --operation_timeout_secs
for a worker that finished, then it exits 1 naming that worker as gone
(the chief, once, in last_step:ps_sync). Here a ps's queue on a gRPC
server of this process (127.0.0.1) takes TOKENS tokens sent at random
moments while it looks for them in looks of WAIT_SECS: a dequeue bounded
by a run's timeout (the ps before) lost tokens so in each of 14 runs (the
first token, whose look timed out as its run started, and up to 3 more).
"""

import random
import threading
import time

import tensorflow as tf
from conftest import free_port

from multigpu.distributed import ps

TOKENS = 300
# Seconds a look waits for a token: short, so that many looks end as a
# token comes.
WAIT_SECS = 0.01


def _send(sess, enqueue, token):
    """Puts the tokens 0..TOKENS-1 in the queue, at random moments."""
    pause = random.Random(0)
    for i in range(TOKENS):
        time.sleep(pause.uniform(0, 2 * WAIT_SECS))
        sess.run(enqueue, {token: i})


def test_a_ps_takes_every_done_token_though_its_looks_end_as_tokens_come():
    server = tf.distribute.Server(
        {"ps": ["127.0.0.1:%d" % free_port()]}, "ps", 0
    )
    with tf.Graph().as_default():
        with tf.device("/job:ps/task:0"):
            queue = tf.queue.FIFOQueue(TOKENS, tf.int32, shapes=[[]])
            token = tf.compat.v1.placeholder(tf.int32, [])
            enqueue = queue.enqueue(token)
        tokens = ps.DoneTokens(queue)
        with tf.compat.v1.Session(server.target) as sess:
            sender = threading.Thread(target=_send, args=(sess, enqueue, token))
            sender.start()
            taken = set()
            while sender.is_alive():
                taken |= tokens.take(sess, WAIT_SECS)
            sender.join()
            taken |= tokens.take(sess, 0)

    assert set(range(TOKENS)) - taken == set()
