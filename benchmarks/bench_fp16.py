"""--use_fp16 (bfloat16 on a CPU) vs float32: step speed at equal accuracy.

Run it from the repository root:
  python -m benchmarks.bench_fp16 [--steps=3] [--rounds=2]
      [--accuracy_steps=100]

Speed: the one-device graph of cifar10_train.py, fed one random batch held
in the graph, with the layers computing in placement.compute_dtype(True,
['/cpu:0']) (bfloat16; variables stay float32, LRN computes in float32) vs
float32, interleaved. Goal: >= 1.8x. A CPU without bfloat16 instructions
(AVX512_BF16, AMX) would convert instead of computing faster, and there
--use_fp16 computes float32: the benchmark then says so and measures
nothing. The result names the CPU and its instruction sets.

Accuracy: both dtypes train --accuracy_steps steps from the same initial
weights on the sample set (`cifar10_batches.train_inputs`), then score
precision @ 1 on the first EVAL_EXAMPLES test records in their own dtype.
Equal accuracy: within ACCURACY_TOLERANCE of each other.

Profile: the share of each op type in one traced bfloat16 step (RunOptions
FULL_TRACE, ops run one at a time so their times add up).
"""

import collections

import tensorflow as tf

import cifar10
from benchmarks import common
from data_sets import cifar10_batches
from multigpu.graph import placement

NAME = "fp16"
SPEEDUP_GOAL = 1.8
EVAL_EXAMPLES = 1000  # Test records scored after training.
# Precision @ 1 of the two dtypes may differ by this much and be equal.
ACCURACY_TOLERANCE = 0.02
PROFILE_STEPS = 3  # Traced steps averaged in the profile.
PROFILE_TOP = 8  # Op types listed in the profile.
# The headline's value where the CPU lacks the instructions.
NO_BFLOAT16 = (
    "not measured: the CPU has no bfloat16 instructions (AVX512_BF16 or "
    "AMX), so --use_fp16 computes float32"
)


def trained_precision(dtype, initial, steps, data_dir):
    """Trains steps steps from initial weights, then scores the test set.

    Args:
      dtype: the compute dtype.
      initial: dict variable name -> array, or None to draw the weights.
      steps: int, training steps of BATCH_SIZE examples.
      data_dir: str, the sample set's folder.

    Returns:
      (float precision @ 1 on EVAL_EXAMPLES test records, dict of the
      initial weights used).
    """
    model = common.one_device_graph(
        lambda batch_size: (
            lambda: cifar10_batches.train_inputs(data_dir, batch_size)
        ),
        common.BATCH_SIZE,
        dtype,
    )
    with model.graph.as_default():
        images, labels, init_op = cifar10_batches.eval_inputs(
            "test", data_dir, EVAL_EXAMPLES, EVAL_EXAMPLES
        )
        scope = tf.compat.v1.get_variable_scope()
        with tf.compat.v1.variable_scope(scope, reuse=True):
            logits = cifar10.inference(tf.cast(images, dtype))
        hits = tf.reduce_sum(
            tf.cast(tf.nn.in_top_k(labels, logits, k=1), tf.int32)
        )
        variables = tf.compat.v1.trainable_variables()
    sess = common.start_session(model)
    if initial is None:
        initial = {v.op.name: sess.run(v) for v in variables}
    with model.graph.as_default():
        for var in variables:
            var.load(initial[var.op.name], sess)
    common.run_steps(sess, model.train_op, steps)
    sess.run(init_op)
    return sess.run(hits) / EVAL_EXAMPLES, initial


def op_profile(model):
    """The share of each op type in a traced step, ops run one at a time.

    Returns:
      dict: step_ms (the summed op time of a step) and top: op type ->
      share of it, for the PROFILE_TOP largest.
    """
    config = placement.session_config(model.devices)
    config.inter_op_parallelism_threads = 1
    sess = common.start_session(model, config)
    common.run_steps(sess, model.train_op, common.WARMUP_STEPS)
    micros = collections.Counter()
    for _ in range(PROFILE_STEPS):
        metadata = tf.compat.v1.RunMetadata()
        sess.run(
            model.train_op,
            options=tf.compat.v1.RunOptions(
                trace_level=tf.compat.v1.RunOptions.FULL_TRACE
            ),
            run_metadata=metadata,
        )
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                # The timeline label reads 'NAME = TYPE(INPUTS)'.
                kind = node.timeline_label.partition(" = ")[2].split("(")[0]
                micros[kind or node.node_name] += node.all_end_rel_micros
    total = sum(micros.values())
    return {
        "step_ms": round(total / PROFILE_STEPS / 1e3, 1),
        "top": {
            kind: round(each / total, 3)
            for kind, each in micros.most_common(PROFILE_TOP)
        },
    }


def main():
    """Measures float32 and the reduced dtype: speed, accuracy, profile."""
    args = common.parse_args(
        NAME, __doc__, steps=3, rounds=2, accuracy_steps=100
    )
    reduced = placement.compute_dtype(True, ["/cpu:0"])
    if reduced == tf.float32:
        # --use_fp16 computes float32 on this CPU: nothing to compare.
        common.report(
            args, {"rates": {}, "headline": {"bfloat16/float32": NO_BFLOAT16}}
        )
        return
    models = {
        dtype.name: common.one_device_graph(
            common.synthetic_input, common.BATCH_SIZE, dtype
        )
        for dtype in (tf.float32, reduced)
    }
    variants = {
        name: common.train_variant(model, args.steps)
        for name, model in models.items()
    }
    rates = common.interleave(variants, args.rounds)
    speedup = common.ratio(rates[reduced.name], rates["float32"])
    profile = op_profile(models[reduced.name])
    data_dir = common.cifar10_data_dir()
    precision = {}
    initial = None
    for dtype in (tf.float32, reduced):
        precision[dtype.name], initial = trained_precision(
            dtype, initial, args.accuracy_steps, data_dir
        )
    difference = abs(precision[reduced.name] - precision["float32"])
    common.report(
        args,
        {
            "unit": "examples/s",
            "batch_size": common.BATCH_SIZE,
            "steps": args.steps,
            "reduced_dtype": reduced.name,
            "rates": rates,
            "precision_at_1": precision,
            "profile": {reduced.name: profile},
            "headline": {
                "%s/float32" % reduced.name: common.goal(speedup, SPEEDUP_GOAL),
                "precision @ 1 after %d steps, float32"
                % args.accuracy_steps: precision["float32"],
                "precision @ 1 after %d steps, %s"
                % (args.accuracy_steps, reduced.name): precision[reduced.name],
                "equal accuracy (within %g)" % ACCURACY_TOLERANCE: bool(
                    difference <= ACCURACY_TOLERANCE
                ),
                "%s step, top op types (share)" % reduced.name: ", ".join(
                    "%s %.0f%%" % (kind, 100 * share)
                    for kind, share in profile["top"].items()
                ),
            },
        },
    )


if __name__ == "__main__":
    main()
