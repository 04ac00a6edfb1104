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
import socket
import threading
import time

import pytest
import tensorflow as tf
from conftest import free_port
from helpers import ports

from multigpu import errors
from multigpu.distributed import cluster, ps
from multigpu.graph import placement

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


def test_a_ps_serves_on_while_a_worker_has_not_said_it_is_done(monkeypatch):
    # Worker 1 has started (its port answers as a gRPC server) and not said
    # it is done; the chief is done. The ps waits
    # --operation_timeout_secs=1 for worker 1.
    monkeypatch.setattr(ps, "WATCHDOG_INTERVAL_SECS", 0.1)
    listening = socket.create_server(("127.0.0.1", 0))
    ports.serve(listening, ports.SETTINGS_FRAME)
    workers = "127.0.0.1:%d,127.0.0.1:%d" % (
        free_port(),
        listening.getsockname()[1],
    )
    ps_hosts = "127.0.0.1:%d" % free_port()
    ps_task = cluster.cluster_task(ps_hosts, workers, "ps", 0)
    chief = cluster.cluster_task(ps_hosts, workers, "worker", 0)
    config = cluster.task_config(placement.session_config(), ps_task)
    server = tf.distribute.Server(ps_task.cluster, "ps", 0, config=config)
    with (
        tf.Graph().as_default(),
        tf.compat.v1.Session(server.target, config=config) as sess,
    ):
        sess.run(ps.done_signals(chief))

    with listening, pytest.raises(errors.TrainingError) as raised:
        ps.serve_until_done(ps_task, server, config, timeout_secs=1)

    assert str(raised.value) == (
        "ps task 0: the chief (worker task 0) is done, and worker task 1 "
        "(%s) did not say it was done within --operation_timeout_secs=1; "
        "the ps stops" % workers.split(",")[1]
    )
