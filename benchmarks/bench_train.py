"""Training throughput through the real input pipeline vs synthetic data.

Run it from the repository root:
  python -m benchmarks.bench_train [--steps=40] [--rounds=3]

Four graphs, built from the library in this process: the one-device graph of
cifar10_train.py (batch 128) and the 2-tower graph of
cifar10_multi_gpu_train.py (2 virtual CPU devices x 64, the same 128
examples per step), each fed either by `cifar10_batches.distorted_dataset`
over the binary records of the sample set, or by one random batch held in
the graph as constants. The ratio real/synthetic is the input pipeline's
cost to training (goal: >= 0.97).
"""

import functools

from benchmarks import common

NAME = "train"
TOWERS = 2  # The multi-tower graph: 2 towers of BATCH_SIZE / 2.
# Timed steps per round: at 1,300+ examples/s (AVX-512) 10 steps took under
# a second a round, and the ratio swung from 0.90 to 1.10 between runs.
STEPS = 40


def main():
    """Measures the four graphs interleaved and reports real/synthetic."""
    args = common.parse_args(NAME, __doc__, steps=STEPS)
    data_dir = common.cifar10_data_dir()
    real = functools.partial(common.real_input, data_dir=data_dir)
    synthetic = common.synthetic_input
    per_tower = common.BATCH_SIZE // TOWERS
    models = {
        "one_device_real": common.one_device_graph(real, common.BATCH_SIZE),
        "one_device_synthetic": common.one_device_graph(
            synthetic, common.BATCH_SIZE
        ),
        "towers_real": common.tower_graph(real, TOWERS, per_tower),
        "towers_synthetic": common.tower_graph(synthetic, TOWERS, per_tower),
    }
    variants = {
        name: common.train_variant(model, args.steps)
        for name, model in models.items()
    }
    rates = common.interleave(variants, args.rounds)
    one_device = common.ratio(
        rates["one_device_real"], rates["one_device_synthetic"]
    )
    multi = common.ratio(rates["towers_real"], rates["towers_synthetic"])
    common.report(
        args,
        {
            "unit": "examples/s",
            "batch_size": common.BATCH_SIZE,
            "towers": TOWERS,
            "steps": args.steps,
            "rates": rates,
            "headline": {
                "one device, real/synthetic": common.goal(one_device, 0.97),
                "2 towers, real/synthetic": common.goal(multi, 0.97),
                "one device, synthetic examples/s": rates[
                    "one_device_synthetic"
                ]["rate"],
            },
        },
    )


if __name__ == "__main__":
    main()
