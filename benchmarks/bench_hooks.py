"""What logging, summaries and checkpoints cost: bare loop vs run_training.

Run it from the repository root:
  python -m benchmarks.bench_hooks [--steps=300] [--rounds=5]

The same one-device graph of cifar10_train.py (through the real input
pipeline), trained for --steps steps from scratch in two ways, interleaved:
- bare: a plain Session, the variables initialised, then
  `sess.run(train_op)` in a loop;
- run_training: `training.run_training` with a temporary train_dir and the
  trainer's defaults for a long run (log every 10 steps, summaries and
  histograms every SUMMARY_STEPS steps, checkpoints every 1,000 steps and at
  the end, NaN check every step). A run shorter than 20 times SUMMARY_STEPS
  writes its summaries more often (`loop_hooks.summary_steps`): timing one
  of those would measure a short run's 20 summaries, not the loop.
Two rates each: the steady state, steps 11 to --steps (for run_training
timed when its logger prints the lines of steps 10 and --steps; the
summaries of steps 100, 200 and 300 fall in it), and the whole run (session
set-up, the graph and checkpoint written at the start, the checkpoint at
the end). The steady state's cost is taken round by round (each
run_training against the bare loop beside it): its median, and its spread
(the largest round's cost less the smallest) beside it. Goal: the steady
state costs <= 3%.
"""

import contextlib
import io
import re
import shutil
import statistics
import tempfile

from benchmarks import common
from multigpu.flags import choices
from multigpu.graph import placement
from multigpu.run import loop_hooks, training
from multigpu.train_dir import restore

NAME = "hooks"
LOG_FREQUENCY = 10  # cifar10_train.py's default --log_frequency.
WHOLE = "whole_"  # Prefix of the whole-run measures of a sample.
STEP_LINE = re.compile(r": step [0-9]+, loss = ")


def bare_variant(steps, batch_size):
    """Returns a variant: session, initialisation and `steps` bare steps.

    The sample is the steady state (steps 11 to `steps`), with the whole
    run's measures prefixed 'whole_'.
    """

    def run():
        model = common.one_device_graph(common.real_input, batch_size)
        whole, steady = common.Stopwatch(), common.Stopwatch()
        whole.start()
        sess = common.start_session(model)
        common.run_steps(sess, model.train_op, LOG_FREQUENCY)
        steady.start()
        common.run_steps(sess, model.train_op, steps - LOG_FREQUENCY)
        result = steady.stop((steps - LOG_FREQUENCY) * batch_size)
        sess.close()
        return dict(result, **whole_run(whole.stop(steps * batch_size)))

    return run


class StepLineClock(io.StringIO):
    """Collects the trainer's log; times from its first step line to its last.

    The logger prints 'step 10, ...' after the 10th step: the clock starts
    there, and each later step line stops it, so the last stop times the
    steady state exactly as `bare_variant` does.
    """

    def __init__(self, batch_size):
        super().__init__()
        self.stopwatch = common.Stopwatch()
        self.batch_size = batch_size
        self.steps = None
        self.result = None

    def write(self, text):
        if STEP_LINE.search(text):
            if self.steps is None:
                self.stopwatch.start()
                self.steps = 0
            else:
                self.steps += LOG_FREQUENCY
                self.result = self.stopwatch.stop(self.steps * self.batch_size)
        return super().write(text)


def run_training_variant(steps, batch_size):
    """Returns a variant: `training.run_training` for `steps` steps.

    The sample is the steady state, timed by `StepLineClock`, with the
    whole call's measures prefixed 'whole_'.
    """

    def run():
        model = common.one_device_graph(common.real_input, batch_size)
        train_dir = tempfile.mkdtemp(prefix="hooks_", dir=common.RESULTS_DIR)
        clock = StepLineClock(batch_size)
        whole = common.Stopwatch()
        whole.start()
        with model.graph.as_default(), contextlib.redirect_stdout(clock):
            training.run_training(
                training.Step(model.train_op, model.loss, batch_size),
                choices.Schedule(
                    LOG_FREQUENCY, steps, 1000, loop_hooks.SUMMARY_STEPS
                ),
                choices.Start(False, restore.Pretrained()),
                training.TrainDir(train_dir),
                training.Process(config=placement.session_config()),
            )
        result = dict(clock.result, **whole_run(whole.stop(steps * batch_size)))
        shutil.rmtree(train_dir)
        return result

    return run


def whole_run(sample):
    """The whole-run measures of a `Stopwatch.stop` sample, renamed."""
    return {WHOLE + key: value for key, value in sample.items()}


def whole_of(summary):
    """The whole-run measures of a `common.summarize` dict, as a summary."""
    return {
        key[len(WHOLE) :]: value
        for key, value in summary.items()
        if key.startswith(WHOLE)
    }


def cost(ratio):
    """1 - a `common.ratio` of hooked to bare rates: the hooks' share."""
    return dict(
        ratio,
        **{key: round(1 - ratio[key], 3) for key in ("value", "wall", "cpu")},
    )


def steady_cost(hooked, bare):
    """The steady state's cost round by round: its median and spread.

    Args:
      hooked, bare: `common.summarize` dicts of the two loops.

    Returns:
      A `cost` dict whose value is the median of the rounds' costs, on the
      basis `common.ratio` chose, with spread: their largest less their
      smallest.
    """
    result = cost(common.ratio(hooked, bare))
    key = "rates" if result["basis"] == "wall" else "cpu_rates"
    rounds = [1 - h / b for h, b in zip(hooked[key], bare[key])]
    result["value"] = round(statistics.median(rounds), 3)
    result["spread"] = round(max(rounds) - min(rounds), 3)
    return result


def main():
    """Measures both loops interleaved and reports the cost of the hooks."""
    args = common.parse_args(NAME, __doc__, steps=300, rounds=5)
    # The first session of a process pays for thread pools and kernels.
    bare_variant(LOG_FREQUENCY + 1, common.BATCH_SIZE)()
    variants = {
        "bare": bare_variant(args.steps, common.BATCH_SIZE),
        "run_training": run_training_variant(args.steps, common.BATCH_SIZE),
    }
    result = common.interleave(variants, args.rounds)
    bare, hooked = result["bare"], result["run_training"]
    steady = steady_cost(hooked, bare)
    whole_cost = cost(common.ratio(whole_of(hooked), whole_of(bare)))
    common.report(
        args,
        {
            "unit": "examples/s",
            "batch_size": common.BATCH_SIZE,
            "steps": args.steps,
            "rates": result,
            "headline": {
                "cost, steady state": common.goal(steady, 0.03, True),
                "cost, whole %d-step run" % args.steps: whole_cost,
            },
        },
    )


if __name__ == "__main__":
    main()
