"""The filter of TensorFlow's C++ stderr lines, a process of its own.

`quiet_cpp_logs` starts it as `python -I -S cpp_log_filter.py`, reading a
pipe that takes the script's file descriptor 2; it passes each line on to
the terminal but the dropped ones, and ends when the pipe closes: at the
script's exit, or at its death by an abort or a fatal signal, after
passing on the lines written just before (which a thread of the dying
script would lose). It imports only the standard library.
"""

import os
import re

# The C++ lines the filter drops: INFO lines ('I1123 18:03:47.603 ...' or
# 'I0000 00:00:...'), the notice of logs written before absl::InitializeLog
# and the second line of the CPU-instructions notice; oneDNN's notice that
# its uint8 kernels fall back to Eigen (an E line, printed even on CPUs with
# AVX-512, and the results are the same); and the lines that echo a failure
# the script reports itself in one line: a failed step (a NaN histogram
# aborts the step's rendezvous, then cancels the input), an allocation that
# does not fit (the allocator's map of its memory), a port in use. A ps
# looks for its chief between the waits for its workers' done tokens, and
# each wait it ends is a queue warning. A worker that loses a ps or a peer
# cancels the tensors it was receiving from it (a warning each), echoes the
# gRPC status of the last one, and its master logs the step's UNAVAILABLE
# and that of the step's cleanup; in a cluster of workers only, its
# collective ops log their abort (the task reports the loss in one line).
# An error's continuation lines (the '\t [[NODE]]' it struck in, the
# remote task's gRPC status, a hint, a blank line) go with it. Grappler's
# notice that it leaves a cond's Merge with a control input unoptimised,
# which the dry run's audit of the rewritten graph prints (the graph is the
# same). Grappler's notice, with its kernel list, that it leaves a float16
# batch norm and its ReLU unfused on the CPU, which has no fused kernel for
# them (the graph computes as written).
_DROPPED_LINE = re.compile(
    rb"^(I\d{4} \d\d:\d\d:\d\d"
    rb"|WARNING: All log messages before absl::InitializeLog"
    rb"|To enable the following instructions:"
    rb"|E\d{4} [^]]*\] oneDNN supports DT_UINT8 only on platforms with "
    rb"|W\d{4} [^]]*\] Local rendezvous is aborting"
    rb"|W\d{4} [^]]*\] OP_REQUIRES failed at \S+ : CANCELLED"
    rb"|W\d{4} [^]]*\] OP_REQUIRES failed at \S+ : RESOURCE_EXHAUSTED: OOM "
    rb"|W\d{4} [^]]*\] Allocator \(\w+\) ran out of memory trying "
    rb"|W\d{4} [^]]*bfc_allocator\.cc:\d+\] [*_x]+\s*$"
    rb"|If the cause is memory fragmentation maybe the environment variable"
    rb"|Current allocation summary follows\."
    rb"|W\d{4} [^]]*\] done_queue\d+: Skipping cancelled dequeue attempt "
    rb"|W\d{4} [^]]*grpc_worker_service\.cc:\d+\] RecvTensor cancelled for "
    rb"|Additional GRPC error information from remote target "
    rb"|:.*Error received from peer "
    rb"|[EW]\d{4} [^]]*master_session\.cc:\d+\] (Cleanup partition error: )?"
    rb"UNAVAILABLE: "
    rb"|E\d{4} [^]]*ring_alg\.cc:\d+\] Aborting \w+ with UNAVAILABLE: "
    rb"|E\d{4} [^]]*base_collective_executor\.cc:\d+\] "
    rb"BaseCollectiveExecutor::StartAbort UNAVAILABLE: "
    rb"|The error could be from a previous operation\. Restart your program "
    rb"|W\d{4} [^]]*loop_optimizer\.cc:\d+\] Skipping loop optimization "
    rb"|W\d{4} [^]]*graph_view\.cc:\d+\] No registered '_FusedBatchNormEx' "
    rb"OpKernel for CPU devices "
    rb"|\t \(OpKernel was found, but attributes didn't match\) "
    rb"|\t\.  Registered:  device='"
    rb"|  device='\w+'; \w+ in \[DT_"
    rb"|E\d{4} [^]]*\] Failed to add port to server: "
    rb"|E\d{4} [^]]*\] UNKNOWN: Could not start gRPC server"
    rb"|Hint: If you want to see a list of allocated tensors when OOM happens"
    rb"|\t \[\["
    rb"|\s*$)"
)
# cuInit's failure, an E line on every machine without NVIDIA's driver
# (TensorFlow then uses the CPU, as the script says); with the driver it is
# a real CUDA error and is shown.
_NO_DRIVER_LINE = re.compile(rb"^E\d{4} [^]]*\] failed call to cuInit: ")
# Present on a Linux machine whose NVIDIA kernel driver is loaded.
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"


def is_dropped(line, gpu_driver):
    """Whether the filter drops a C++ stderr line.

    Args:
      line: bytes, one line as TensorFlow's C++ side writes it.
      gpu_driver: bool, whether the machine has NVIDIA's driver.
    """
    if _DROPPED_LINE.match(line):
        return True
    return not gpu_driver and bool(_NO_DRIVER_LINE.match(line))


def pass_on(read_fd, write_fd, gpu_driver):
    """Copies the lines of read_fd to write_fd, but the dropped ones."""
    with os.fdopen(read_fd, "rb") as pipe, os.fdopen(write_fd, "wb") as out:
        for line in pipe:
            if not is_dropped(line, gpu_driver):
                out.write(line)
                out.flush()


def main():
    """Passes stdin's lines on to stderr, but the dropped ones, until EOF."""
    pass_on(0, 2, os.path.exists(NVIDIA_DRIVER_FILE))


if __name__ == "__main__":
    main()
