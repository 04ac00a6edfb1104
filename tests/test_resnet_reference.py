"""ResNet-20 against a reference written apart: a NumPy forward pass.

The equivalence runner holds the towers to one device that runs the same
model code, so a change to the ResNet itself cancels there. Here the
suite's logits (as the eval builds them: batch norm on its moving
statistics) are held to a NumPy ResNet-20 of He et al. 2016, section 4.2,
computed from the built graph's weights: every constant below is the
paper's, not read from cifar10_models/resnet.py.
"""

import numpy as np
import tensorflow as tf

from cifar10_models import registry

# He et al. 2016, section 4.2: 3 blocks per stage, 16, 32, 64 filters.
BLOCKS_PER_STAGE = 3
STAGE_FILTERS = (16, 32, 64)
# The batch norm's epsilon of the authors' Torch code (fb.resnet.torch).
EPSILON = 1e-5
BATCH = 3


def _conv_same(x, kernel, stride):
    """TensorFlow's 'SAME' convolution: float64 [b, h, w, c] -> [b, h', w', k].

    SAME pads (kernel - stride) or so rows in all, the extra one after:
    a 24-row map convolved 3x3 with stride 2 is padded by 0 above and 1
    below.
    """
    size, _, _, depth = kernel.shape
    batch, height, width, _ = x.shape
    out_h, out_w = -(-height // stride), -(-width // stride)
    pad_h = max((out_h - 1) * stride + size - height, 0)
    pad_w = max((out_w - 1) * stride + size - width, 0)
    x = np.pad(
        x,
        [
            (0, 0),
            (pad_h // 2, pad_h - pad_h // 2),
            (pad_w // 2, pad_w - pad_w // 2),
            (0, 0),
        ],
    )
    out = np.zeros([batch, out_h, out_w, depth])
    for i in range(size):
        for j in range(size):
            patch = x[
                :,
                i : i + stride * (out_h - 1) + 1 : stride,
                j : j + stride * (out_w - 1) + 1 : stride,
            ]
            out += np.einsum("bhwc,ck->bhwk", patch, kernel[i, j])
    return out


def _batch_norm(x, weights, name):
    """Inference mode: the moving statistics, then gamma and beta."""
    mean = weights[name + "/moving_mean"]
    variance = weights[name + "/moving_variance"]
    normalised = (x - mean) / np.sqrt(variance + EPSILON)
    return normalised * weights[name + "/gamma"] + weights[name + "/beta"]


def _shortcut(x, filters, stride):
    """Option A: subsampled, new channels zero-padded half on each side."""
    x = x[:, ::stride, ::stride, :]
    extra = filters - x.shape[-1]
    return np.pad(x, [(0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)])


def _relu(x):
    return np.maximum(x, 0.0)


def numpy_resnet20(images, weights):
    """float64 [batch, 10] logits of float32 [batch, 24, 24, 3] images.

    Args:
      weights: dict of the graph's variable names (without 'model/') ->
        float32 arrays.
    """
    x = _conv_same(images.astype(np.float64), weights["conv1/kernel"], 1)
    x = _relu(_batch_norm(x, weights, "bn1"))
    for stage, filters in enumerate(STAGE_FILTERS, start=1):
        for block in range(1, BLOCKS_PER_STAGE + 1):
            stride = 2 if stage > 1 and block == 1 else 1
            name = "stage%d/block%d/" % (stage, block)
            y = _conv_same(x, weights[name + "conv1/kernel"], stride)
            y = _relu(_batch_norm(y, weights, name + "bn1"))
            y = _conv_same(y, weights[name + "conv2/kernel"], 1)
            y = _batch_norm(y, weights, name + "bn2")
            x = _relu(y + _shortcut(x, filters, stride))
    x = x.mean(axis=(1, 2))  # [batch, 64]
    return x @ weights["fc/kernel"] + weights["fc/bias"]


def _suite_logits_and_weights(images):
    """The eval's ResNet-20 logits, its batch norm's statistics drawn.

    The statistics and the batch norm's gamma and beta are drawn away from
    their start (0, 1), so that every one of them counts.
    """
    rng = np.random.default_rng(3)
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        logits = registry.logits(
            registry.MODELS["resnet20"], tf.constant(images), False, tf.float32
        )
        variables = tf.compat.v1.global_variables()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for var in variables:
                kind = var.op.name.rsplit("/", 1)[-1]
                shape = var.shape.as_list()
                if kind in ("moving_variance", "gamma"):
                    var.load(rng.uniform(0.5, 1.5, shape), sess)
                elif kind in ("moving_mean", "beta", "bias"):
                    var.load(rng.normal(0.0, 0.3, shape), sess)
            weights = sess.run(
                {v.op.name[len("model/") :]: v for v in variables}
            )
            return sess.run(logits), weights


def test_resnet20_logits_equal_a_numpy_forward_pass_of_its_weights():
    images = np.random.default_rng(0).normal(size=[BATCH, 24, 24, 3])
    images = images.astype(np.float32)

    logits, weights = _suite_logits_and_weights(images)
    expected = numpy_resnet20(images, weights)

    # float32 against float64 through 20 layers: measured 8.2e-5 of
    # logits up to 165 (5e-7 of the largest); a shortcut that pads its new
    # channels on one side moves them by 34.
    largest = np.max(np.abs(expected))
    assert logits.shape == (BATCH, 10) and largest > 1.0
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5 * largest)
