"""Eval images/s (cifar10_eval.py's graph) vs training images/s.

Run it from the repository root:
  python -m benchmarks.bench_eval [--num_examples=5120] [--steps=10]

Eval: the graph of cifar10_eval.py (cifar10_input.inputs over the sample
set's test records, cifar10.inference, tf.nn.in_top_k), one pass over
--num_examples examples, the hits summed in Python as the eval does.
Training: the one-device graph of cifar10_train.py through
cifar10_batches.distorted_dataset. Both at batch 128, interleaved. Goal: eval
>= 2.5x training images/s.
"""

import numpy as np
import tensorflow as tf

import cifar10
from benchmarks import common
from data_sets import cifar10_batches
from multigpu.graph import placement

NAME = "eval"


def eval_variant(data_dir, batch_size, num_examples):
    """Returns a variant for `interleave`: one full pass of the eval graph."""
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/cpu:0"):
            images, labels, rewind = cifar10_batches.eval_inputs(
                "test", data_dir, batch_size, num_examples
            )
        logits = cifar10.inference(images)
        top_1 = tf.nn.in_top_k(predictions=logits, targets=labels, k=1)
        init_op = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph, config=placement.session_config())
    sess.run(init_op)

    def one_pass():
        sess.run(rewind)
        hits = 0
        try:
            while True:
                hits += np.sum(sess.run(top_1))
        except tf.errors.OutOfRangeError:
            return hits

    def run():
        sess.run(rewind)
        common.run_steps(sess, top_1, common.WARMUP_STEPS)
        return common.timed(one_pass, num_examples)

    return run


def main():
    """Measures eval passes and training steps interleaved."""
    args = common.parse_args(NAME, __doc__, num_examples=5120, steps=10)
    data_dir = common.cifar10_data_dir()
    batch_size = common.BATCH_SIZE
    train = common.one_device_graph(
        lambda b: common.real_input(b, data_dir), batch_size
    )
    variants = {
        "eval": eval_variant(data_dir, batch_size, args.num_examples),
        "train": common.train_variant(train, args.steps),
    }
    rates = common.interleave(variants, args.rounds)
    speedup = common.ratio(rates["eval"], rates["train"])
    common.report(
        args,
        {
            "unit": "images/s",
            "batch_size": batch_size,
            "num_examples": args.num_examples,
            "steps": args.steps,
            "rates": rates,
            "headline": {
                "eval/train images/s": common.goal(speedup, 2.5),
                "eval images/s": rates["eval"]["rate"],
            },
        },
    )


if __name__ == "__main__":
    main()
