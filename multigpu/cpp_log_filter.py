"""The filter of TensorFlow's C++ stderr lines, a process of its own.

`quiet_cpp_logs` starts it as `python -I -S cpp_log_filter.py` on a pipe
that takes the script's file descriptor 2; it ends when the pipe closes,
also at the script's death by a signal, after passing on the lines written
just before (which a thread of the dying script would lose). Standard
library only.
"""

import os
import re

# The C++ lines the filter drops: INFO lines and the start-up notices;
# oneDNN's notice that its uint8 kernels fall back to Eigen (an E line,
# even on CPUs with AVX-512; the results are the same); the lines that echo
# a failure the script reports itself in one line (a failed step's
# rendezvous and cancelled input, an allocation that does not fit, a port
# in use, a lost ps or peer and its gRPC status, collectives' aborts, a
# group's leader that refuses a worker of another job) with
# their continuation lines; a ps's queue warning for each wait for its
# workers' done tokens it ends; Grappler's notices of a cond's Merge left
# unoptimised (the dry run's audit) and of a float16 batch norm left
# unfused on the CPU, which has no fused kernel (the graph is the same).
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
    rb"BaseCollectiveExecutor::StartAbort (UNAVAILABLE: |(FAILED_PRECONDITION"
    rb"|INTERNAL): Device \S+ (current incarnation doesn't match|is joining "
    rb"a group with size))"
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
# cuInit's failure, an E line on every machine without NVIDIA's driver;
# with the driver it is a real CUDA error and is shown.
_NO_DRIVER_LINE = re.compile(rb"^E\d{4} [^]]*\] failed call to cuInit: ")
NVIDIA_DRIVER_FILE = "/proc/driver/nvidia/version"


def is_dropped(line, gpu_driver):
    """Whether the filter drops a C++ stderr line (bytes)."""
    if _DROPPED_LINE.match(line):
        return True
    return not gpu_driver and bool(_NO_DRIVER_LINE.match(line))


def main():
    """Copies stdin's lines to stderr, but the dropped ones, until EOF."""
    gpu_driver = os.path.exists(NVIDIA_DRIVER_FILE)
    with os.fdopen(0, "rb") as pipe, os.fdopen(2, "wb") as out:
        for line in pipe:
            if not is_dropped(line, gpu_driver):
                out.write(line)
                out.flush()


if __name__ == "__main__":
    main()
