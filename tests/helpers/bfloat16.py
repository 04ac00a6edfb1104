"""bfloat16 on this CPU: whether Grappler fuses it, and a graph it would."""


def remapper_fuses_bfloat16():
    """Whether Grappler's remapper fuses bfloat16 convolutions on this CPU.

    It does where oneDNN computes bfloat16 (TensorFlow's
    IsBF16SupportedByOneDNNOnThisCPU: AVX-512 or AVX-NE-CONVERT); on a CPU
    with AVX2 alone the ops stay apart.
    """
    from verification import machine

    flags = machine.cpu_info()["flags"]
    return "avx512f" in flags or "avx_ne_convert" in flags


def bfloat16_conv_graph(device=""):
    """A training step of a bfloat16 Conv2D + BiasAdd + Relu on device.

    Grappler's remapper fuses the three into _FusedConv2D, which allows no
    bfloat16 (see `cluster.may_fuse_ops`), where `remapper_fuses_bfloat16`.

    Returns:
      The `tf.Graph`; its float32 scalar 'total' sums the Relu's output.
    """
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.device(device):
        images = tf.cast(tf.ones([2, 8, 8, 3]), tf.bfloat16)
        weights = tf.compat.v1.get_variable("weights", [3, 3, 3, 4])
        biases = tf.compat.v1.get_variable("biases", [4])
        conv = tf.nn.conv2d(images, tf.cast(weights, tf.bfloat16), 1, "SAME")
        relu = tf.nn.relu(tf.nn.bias_add(conv, tf.cast(biases, tf.bfloat16)))
        total = tf.reduce_sum(tf.cast(relu, tf.float32), name="total")
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(total)
    return graph
