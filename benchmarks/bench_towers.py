"""Tower overhead: 1, 2 and 4 towers at the same 128 examples per step.

Run it from the repository root:
  python -m benchmarks.bench_towers [--steps=8] [--rounds=3]

The graph of cifar10_multi_gpu_train.py (towers.build_towers,
gradient_reduction.average_gradients, cifar10.apply_gradients) on virtual CPU
devices (placement.session_config), fed one random batch held in the graph so
that only the towers are compared: 1 x 128, 2 x 64 and 4 x 32 examples. On one
machine the towers share the same 2 cores, so more towers cannot be faster; the
ratio to 1 tower is what splitting the batch and averaging the gradients cost
(goal: >= 0.97 for 2 and 4 towers).
"""

from benchmarks import common

NAME = "towers"
NUM_TOWERS = (1, 2, 4)


def main():
    """Measures 1, 2 and 4 towers interleaved; reports the ratio to 1."""
    args = common.parse_args(NAME, __doc__, steps=8)
    variants = {
        "%d_towers" % n: common.train_variant(
            common.tower_graph(
                common.synthetic_input, n, common.BATCH_SIZE // n
            ),
            args.steps,
        )
        for n in NUM_TOWERS
    }
    rates = common.interleave(variants, args.rounds)
    headline = {
        "%d towers / 1 tower" % n: common.goal(
            common.ratio(rates["%d_towers" % n], rates["1_towers"]), 0.97
        )
        for n in NUM_TOWERS[1:]
    }
    common.report_rates(args, rates, headline)


if __name__ == "__main__":
    main()
