"""A worker that loses its ps prints our one line, not gRPC's echo of it."""

import subprocess
import sys

from multigpu import cpp_log_filter

# The C++ stderr of a worker whose ps was killed at step 6 (ps cluster, CPU
# towers, TensorFlow 2.21): one warning per tensor it was receiving, then
# the gRPC status of the last, then the worker's own line (Python's stderr,
# here through the filter too, which passes it on).
LOST_PS = (
    b"W0000 00:00:1795660743.832033   23066 grpc_worker_service.cc:536] "
    b"RecvTensor cancelled for 127957907184873886\n"
    * 11
    + b"Additional GRPC error information from remote target "
    b"/job:ps/replica:0/task:0 while calling "
    b"/tensorflow.WorkerService/RecvTensor:\n"
    b":UNKNOWN:Error received from peer  {grpc_status:14, "
    b'grpc_message:"recvmsg:Connection reset by peer"}\n'
)
# The same, the ps killed at step 34: the master's lines of the failed step.
LOST_PS_IN_A_STEP = (
    b"E0000 00:00:1795661053.966298   31857 master_session.cc:1972] Cleanup "
    b"partition error: UNAVAILABLE: sendmsg: Broken pipe (32)\n"
    b"W0000 00:00:1795661053.973524   32267 master_session.cc:2166] "
    b"UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: "
    b"ipv4:127.0.0.1:29421: Failed to connect to remote host: Connection "
    b"refused\n"
)
# A cluster of workers only, worker 1 killed at step 38: worker 0's
# collective ops abort.
LOST_PEER = (
    b"E0000 00:00:1795661251.196362    4681 ring_alg.cc:291] Aborting "
    b"RingReduce with UNAVAILABLE: recvmsg:Connection reset by peer\n"
    b"E0000 00:00:1795661251.196407    4681 base_collective_executor.cc:252] "
    b"BaseCollectiveExecutor::StartAbort UNAVAILABLE: recvmsg:Connection "
    b"reset by peer\n"
    b"E0000 00:00:1795661251.196434    4681 ring_alg.cc:291] Aborting "
    b"RingReduce with UNAVAILABLE: Collective ops is aborted by: "
    b"recvmsg:Connection reset by peer\n"
    b"The error could be from a previous operation. Restart your program to "
    b"reset. [type.googleapis.com/tensorflow.DerivedStatus='']\n"
)
PEER_LINE = (
    b"cifar10_multi_gpu_train.py: error: lost the cluster after 38 local "
    b"steps (DeadlineExceededError): unreachable: worker task 1 "
    b"(127.0.0.1:29432)\n"
)
OUR_LINE = (
    b"cifar10_multi_gpu_train.py: error: lost the cluster: unreachable: ps "
    b"task 0 (127.0.0.1:29421)\n"
)


def filtered(stderr):
    """stderr's bytes as the scripts' C++ log filter passes them on."""
    result = subprocess.run(
        [sys.executable, "-I", "-S", cpp_log_filter.__file__],
        input=stderr,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0
    return result.stderr


def test_a_worker_that_lost_its_ps_shows_only_our_line():
    assert filtered(LOST_PS + OUR_LINE) == OUR_LINE


def test_a_worker_that_lost_its_ps_in_a_step_shows_only_our_line():
    assert filtered(LOST_PS_IN_A_STEP + OUR_LINE) == OUR_LINE


def test_a_worker_that_lost_a_peer_worker_shows_only_our_line():
    assert filtered(LOST_PEER + PEER_LINE) == PEER_LINE


def test_another_grpc_warning_is_still_shown():
    warning = (
        b"W0000 00:00:1795660743.832033   23066 grpc_server_lib.cc:412] "
        b"Server shutdown took 5 s\n"
    )
    assert filtered(LOST_PS + warning) == warning
