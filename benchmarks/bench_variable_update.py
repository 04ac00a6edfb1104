"""Replicated variables against parameter_server on 2 and 4 CPU towers.

Run it from the repository root:
  python -m benchmarks.bench_variable_update [--steps=8] [--rounds=3]

The graph of cifar10_multi_gpu_train.py (`build_graph`) on virtual CPU
devices, fed one random batch held in the graph, 128 examples per step
(2 x 64, 4 x 32), with --variable_update=parameter_server and
--variable_update=replicated (TensorFlow's collective ops, ring, the
default on CPU towers) interleaved. On one machine the towers share the
same cores and memory, so no link is saved: the ratio replicated /
parameter_server is what the all-reduce and the towers' own updates cost
over the one average and update on the CPU. On GPUs the modes differ in
what crosses the links (the dry run prices it), which this cannot show.
"""

from benchmarks import common

NAME = "variable_update"
NUM_TOWERS = (2, 4)
MODES = ("parameter_server", "replicated")


def main():
    """Measures both modes on 2 and 4 towers interleaved; reports ratios."""
    args = common.parse_args(NAME, __doc__, steps=8)
    variants = {
        "%s_%d_towers" % (mode, n): common.train_variant(
            common.tower_graph(
                common.synthetic_input,
                n,
                common.BATCH_SIZE // n,
                update_mode=mode,
            ),
            args.steps,
        )
        for n in NUM_TOWERS
        for mode in MODES
    }
    rates = common.interleave(variants, args.rounds)
    headline = {
        "replicated / parameter_server, %d towers" % n: common.ratio(
            rates["replicated_%d_towers" % n],
            rates["parameter_server_%d_towers" % n],
        )
        for n in NUM_TOWERS
    }
    common.report_rates(args, rates, headline)


if __name__ == "__main__":
    main()
