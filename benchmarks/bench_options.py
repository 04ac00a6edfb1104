"""The multi-GPU trainer's options on the CPU path: staged input and XLA.

Run it from the repository root (about 3 minutes; not part of run_all's
default set, add it with `python -m benchmarks.run_all --only=options`):
  python -m benchmarks.bench_options [--steps=6] [--rounds=3]

The graph of cifar10_multi_gpu_train.py on 2 virtual CPU towers of 64
examples each, through the real input pipeline (the staging only matters
when there is input to stage), one session per variant, interleaved:
- read_in_step: --noprefetch_to_device, each tower takes its batch from
  the shared CPU iterator inside the step (the trainer before the option);
- prefetch: --prefetch_to_device, each tower computes on the batch staged
  by the step before (towers.stage_on_device);
- xla: --xla --noprefetch_to_device, each tower compiled in a jit_scope.
--variable_device=tower is not timed: with --cpu_towers the first tower is
/cpu:0, the default variable device, so the graph is the same. Goal of the
issue for prefetch: no slower than reading in the step (>= 0.97) on a CPU,
where there is no host-to-device copy to hide.
"""

from benchmarks import common

NAME = "options"
NUM_TOWERS = 2
# name -> tower_graph options
VARIANTS = {
    "read_in_step": {},
    "prefetch": {"prefetch": True},
    "xla": {"xla": True},
}


def main():
    """Measures the variants interleaved; reports each against the first."""
    args = common.parse_args(NAME, __doc__, steps=6)
    batch_size = common.BATCH_SIZE // NUM_TOWERS
    variants = {
        name: common.train_variant(
            common.tower_graph(
                common.real_input, NUM_TOWERS, batch_size, **options
            ),
            args.steps,
        )
        for name, options in VARIANTS.items()
    }
    rates = common.interleave(variants, args.rounds)
    baseline = rates["read_in_step"]
    common.report(
        args,
        {
            "unit": "examples/s",
            "num_towers": NUM_TOWERS,
            "batch_size_per_tower": batch_size,
            "steps": args.steps,
            "rates": rates,
            "headline": {
                "prefetch/read_in_step": common.goal(
                    common.ratio(rates["prefetch"], baseline), 0.97
                ),
                "xla/read_in_step": common.ratio(rates["xla"], baseline),
            },
        },
    )


if __name__ == "__main__":
    main()
