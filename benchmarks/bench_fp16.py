"""--use_fp16 (bfloat16 on a CPU) vs float32 training throughput.

Run it from the repository root:
  python -m benchmarks.bench_fp16 [--steps=3] [--rounds=2]

The one-device graph of cifar10_train.py, fed one random batch held in the
graph, with the layers computing in placement.compute_dtype(True, ['/cpu:0'])
(bfloat16; variables and LRN stay float32) vs float32. Goal: >= 1.6x. A CPU
without bfloat16 instructions (AVX512_BF16, AMX) converts instead of
computing faster; the result says which instructions this CPU has.
"""

import tensorflow as tf

from benchmarks import common
from multigpu import placement

NAME = "fp16"
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "avx512f", "avx_vnni")


def cpu_flags():
    """The bfloat16-related instruction sets /proc/cpuinfo lists."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(f.read().split())
    except OSError:
        return "unknown"
    return [flag for flag in BF16_FLAGS if flag in flags]


def main():
    """Measures float32 and the reduced dtype interleaved."""
    args = common.parse_args(NAME, __doc__, steps=3, rounds=2)
    reduced = placement.compute_dtype(True, ["/cpu:0"])
    variants = {
        dtype.name: common.train_variant(
            common.one_device_graph(
                common.synthetic_input, common.BATCH_SIZE, dtype
            ),
            args.steps,
        )
        for dtype in (tf.float32, reduced)
    }
    rates = common.interleave(variants, args.rounds)
    speedup = common.ratio(rates[reduced.name], rates["float32"])
    common.report(
        args,
        {
            "unit": "examples/s",
            "batch_size": common.BATCH_SIZE,
            "steps": args.steps,
            "reduced_dtype": reduced.name,
            "cpu_bf16_instructions": cpu_flags(),
            "rates": rates,
            "headline": {
                "%s/float32" % reduced.name: common.goal(speedup, 1.6)
            },
        },
    )


if __name__ == "__main__":
    main()
