"""Model FLOPs per training example and achieved FLOP/s vs a matmul ceiling.

Run it from the repository root:
  python -m benchmarks.bench_flops [--steps=8] [--rounds=3]

The arithmetic, per 24x24x3 example (a multiply-add is 2 FLOPs; SAME
padding, so a conv's output has its input's height and width):
  conv1  24*24 outputs x 64 filters x 5*5*3 MACs   =  2,764,800 MACs
  conv2  12*12 outputs x 64 filters x 5*5*64 MACs  = 14,745,600 MACs
  local3 2304 x 384                                =    884,736 MACs
  local4 384 x 192                                 =     73,728 MACs
  softmax_linear 192 x 10                          =      1,920 MACs
  forward: 18,470,784 MACs = 36.94 MFLOPs (ReLU, pooling, LRN, the loss
  and the update add well under 1%, left out).
Backward is about 2x forward: each layer computes the gradient of its
weights and of its input, each as costly as its forward product, except
conv1's input gradient, which nothing needs (the images are not trained):
  training = 3 x 36.94 - 5.53 (conv1) = 105.31 MFLOPs per example
(the nominal 3 x forward is 110.8). Cross-check: tf.compat.v1.profiler's
float_ops per example of the forward graph (which also counts bias adds
and the like) and of the whole training graph (every op with registered
FLOPs statistics: the backprop convolutions, but also the element-wise ops
of the gradients, the update and the moving averages).

Achieved FLOP/s = training examples/s of the one-device graph (one random
batch held in the graph) x 105.31 MFLOPs, against the FLOP/s of a float32
4096x4096 matmul (and a bfloat16 one), measured interleaved with it. Goal:
achieved >= 0.75 of the float32 ceiling.
"""

import tensorflow as tf

import cifar10
from benchmarks import common

NAME = "flops"
MATMUL_SIZE = 4096
# (height*width of the output, input depth, output units, kernel area).
LAYERS = {
    "conv1": (24 * 24, 3, 64, 25),
    "conv2": (12 * 12, 64, 64, 25),
    "local3": (1, 6 * 6 * 64, 384, 1),
    "local4": (1, 384, 192, 1),
    "softmax_linear": (1, 192, 10, 1),
}


def model_flops():
    """FLOPs per example: forward, training (exact) and nominal 3x."""
    macs = {
        name: outputs * depth * units * area
        for name, (outputs, depth, units, area) in LAYERS.items()
    }
    forward = 2 * sum(macs.values())
    return {
        "macs_per_layer": macs,
        "forward": forward,
        "training": 3 * forward - 2 * macs["conv1"],
        "training_nominal_3x": 3 * forward,
    }


def profiler_flops(batch_size):
    """tf.compat.v1.profiler float_ops per example: forward and training."""
    model = common.one_device_graph(common.synthetic_input, batch_size)
    options = (
        tf.compat.v1.profiler.ProfileOptionBuilder(
            tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        )
        .with_empty_output()
        .build()
    )
    training = tf.compat.v1.profiler.profile(model.graph, options=options)
    graph = tf.Graph()
    with graph.as_default():
        images, _ = common.synthetic_input(batch_size)()
        cifar10.inference(images)
    forward = tf.compat.v1.profiler.profile(graph, options=options)
    return {
        "forward": forward.total_float_ops // batch_size,
        "training_registered_ops": training.total_float_ops // batch_size,
    }


def matmul_variant(dtype):
    """Returns a variant: one MATMUL_SIZE^2 matmul in dtype (rate: FLOP/s)."""
    graph = tf.Graph()
    with graph.as_default():
        shape = [MATMUL_SIZE, MATMUL_SIZE]
        # Variables, not constants, so that nothing is folded ahead of time.
        a = tf.Variable(tf.cast(tf.random.normal(shape), dtype))
        b = tf.Variable(tf.cast(tf.random.normal(shape), dtype))
        product = tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32))
        init_op = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init_op)
    sess.run(product)

    def run():
        return common.timed(lambda: sess.run(product), 2 * MATMUL_SIZE**3)

    return run


def main():
    """Counts the FLOPs, then times the matmuls and training interleaved."""
    args = common.parse_args(NAME, __doc__, steps=8)
    flops = model_flops()
    counted = profiler_flops(common.BATCH_SIZE)
    train = common.train_variant(
        common.one_device_graph(common.synthetic_input, common.BATCH_SIZE),
        args.steps,
    )
    variants = {
        "matmul_float32": matmul_variant(tf.float32),
        "matmul_bfloat16": matmul_variant(tf.bfloat16),
        "train": train,
    }
    rates = common.interleave(variants, args.rounds)
    train = rates["train"]
    achieved = {
        key: train[key] * flops["training"] for key in ("rate", "cpu_rate")
    }
    achieved["others_cores"] = train.get("others_cores", 0.0)
    ceiling = rates["matmul_float32"]
    fraction = common.ratio(achieved, ceiling)
    common.report(
        args,
        {
            "unit": "FLOPs per example; FLOP/s; train in examples/s",
            "flops_per_example": flops,
            "profiler_flops_per_example": counted,
            "rates": rates,
            "headline": {
                "achieved/float32 matmul FLOP/s": common.goal(fraction, 0.75),
                "achieved training GFLOP/s": round(achieved["rate"] / 1e9, 2),
                "float32 matmul GFLOP/s": round(ceiling["rate"] / 1e9, 2),
                "bfloat16 matmul GFLOP/s": round(
                    rates["matmul_bfloat16"]["rate"] / 1e9, 2
                ),
            },
        },
    )


if __name__ == "__main__":
    main()
