"""ResNet-20 on our towers vs the tutorial net, Keras 3 and PyTorch.

Run it from the repository root (PyTorch from the `bench` extra:
`pip install -e ".[bench]"`; without it the PyTorch entry says so):
  python -m benchmarks.bench_resnet [--steps=4] [--rounds=3]

Images per second and per CPU second of a training step, batch 128 of
24x24x3 images, one fixed random batch (synthetic data), side by side:
- resnet20: `--model=resnet20` in cifar10_multi_gpu_train.py's graph on one
  tower (cifar10_models/resnet.py: tf.compat.v1.layers, batch norm, its
  momentum recipe, the moving averages of the weights and statistics).
- tutorial: the tutorial's net in the same graph, for scale.
- keras: the same ResNet-20 (option A shortcuts, batch norm, L2 1e-4, SGD
  with momentum 0.9) in Keras 3, `fit` on a dataset repeating the batch.
- torch: the same in PyTorch, NCHW.
Goal: resnet20 ahead of both peers (>= 1.0x).
"""

from benchmarks import bench_peers, common
from cifar10_models import registry, resnet

NAME = "resnet"


def keras_resnet20():
    """ResNet-20 in Keras 3, layer for layer as cifar10_models/resnet.py."""
    import keras

    layers = keras.layers
    # Keras' L2(l) is l * sum(w ** 2); ours wd * l2_loss(w) = wd / 2 * sum.
    l2 = keras.regularizers.L2(resnet.WEIGHT_DECAY / 2)

    def conv(x, filters, strides):
        return layers.Conv2D(
            filters,
            3,
            strides,
            padding="same",
            use_bias=False,
            kernel_initializer="he_normal",
            kernel_regularizer=l2,
        )(x)

    def batch_norm(x):
        return layers.BatchNormalization(
            momentum=resnet.BATCH_NORM_MOMENTUM,
            epsilon=resnet.BATCH_NORM_EPSILON,
        )(x)

    def shortcut(x, filters, strides):
        if strides == 1 and x.shape[-1] == filters:
            return x
        extra = filters - x.shape[-1]
        pad = [[0, 0], [0, 0], [0, 0], [extra // 2, extra - extra // 2]]
        return layers.Lambda(
            lambda t: keras.ops.pad(t[:, ::strides, ::strides, :], pad)
        )(x)

    inputs = keras.Input((24, 24, 3))
    x = layers.ReLU()(batch_norm(conv(inputs, resnet.STAGE_FILTERS[0], 1)))
    for stage, filters in enumerate(resnet.STAGE_FILTERS, start=1):
        for block in range(1, resnet.RESNET20_BLOCKS + 1):
            strides = 2 if stage > 1 and block == 1 else 1
            y = layers.ReLU()(batch_norm(conv(x, filters, strides)))
            y = batch_norm(conv(y, filters, 1))
            x = layers.ReLU()(y + shortcut(x, filters, strides))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(resnet.NUM_CLASSES, kernel_regularizer=l2)(x)
    return keras.Model(inputs, outputs)


def torch_resnet20():
    """ResNet-20 in PyTorch, layer for layer as cifar10_models/resnet.py."""
    import torch
    from torch import nn

    bn = dict(momentum=1 - resnet.BATCH_NORM_MOMENTUM, eps=1e-5)

    class Block(nn.Module):
        def __init__(self, in_filters, filters, strides):
            super().__init__()
            self.strides, self.extra = strides, filters - in_filters
            self.conv1 = nn.Conv2d(
                in_filters, filters, 3, strides, 1, bias=False
            )
            self.bn1 = nn.BatchNorm2d(filters, **bn)
            self.conv2 = nn.Conv2d(filters, filters, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(filters, **bn)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            shortcut = x[:, :, :: self.strides, :: self.strides]
            half = self.extra // 2
            # NCHW: zero channels on both sides (option A).
            shortcut = nn.functional.pad(
                shortcut, (0, 0, 0, 0, half, self.extra - half)
            )
            return torch.relu(y + shortcut)

    modules = [
        nn.Conv2d(3, resnet.STAGE_FILTERS[0], 3, 1, 1, bias=False),
        nn.BatchNorm2d(resnet.STAGE_FILTERS[0], **bn),
        nn.ReLU(),
    ]
    in_filters = resnet.STAGE_FILTERS[0]
    for stage, filters in enumerate(resnet.STAGE_FILTERS, start=1):
        for block in range(1, resnet.RESNET20_BLOCKS + 1):
            strides = 2 if stage > 1 and block == 1 else 1
            modules.append(Block(in_filters, filters, strides))
            in_filters = filters
    modules += [
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(in_filters, resnet.NUM_CLASSES),
    ]
    return nn.Sequential(*modules)


def _torch_variant(steps, batch_size):
    """(PyTorch's ResNet-20 variant, {"version", "threads"}), or (None,
    why it is not available)."""
    try:
        import torch
    except ImportError as e:
        return None, "not available: %s" % e
    torch.manual_seed(0)
    model = torch_resnet20()
    # Weight decay on the kernels only, as in ours and in Keras.
    kernels = [p for p in model.parameters() if p.dim() > 1]
    others = [p for p in model.parameters() if p.dim() == 1]
    opt = torch.optim.SGD(
        [
            {"params": kernels, "weight_decay": resnet.WEIGHT_DECAY},
            {"params": others},
        ],
        lr=resnet.INITIAL_LEARNING_RATE,
        momentum=resnet.MOMENTUM,
    )
    variant, version, threads = bench_peers.torch_train_variant(
        model, opt, steps, batch_size
    )
    return variant, {"version": version, "threads": threads}


def main():
    """Measures the four interleaved; reports rates and ratios."""
    args = common.parse_args(NAME, __doc__, steps=4)
    batch_size = common.BATCH_SIZE
    ours = {
        name: common.tower_graph(
            common.synthetic_input, 1, batch_size, model=registry.model(name)
        )
        for name in ("resnet20", "tutorial")
    }
    variants = {
        name: common.train_variant(graph, args.steps)
        for name, graph in ours.items()
    }
    import keras

    variants["keras"] = bench_peers.keras_fit_variant(
        keras_resnet20(),
        keras.optimizers.SGD(resnet.INITIAL_LEARNING_RATE, resnet.MOMENTUM),
        args.steps,
        batch_size,
    )
    result = {"unit": "examples/s", "batch_size": batch_size}
    result["steps"] = args.steps
    torch_variant, result["torch"] = _torch_variant(args.steps, batch_size)
    if torch_variant is not None:
        variants["torch"] = torch_variant
    rates = common.interleave(variants, args.rounds)
    result["rates"] = rates
    result["headline"] = {
        "resnet20/tutorial": common.ratio(rates["resnet20"], rates["tutorial"]),
        "resnet20 ours/keras": common.goal(
            common.ratio(rates["resnet20"], rates["keras"]), 1.0
        ),
    }
    if "torch" in rates:
        result["headline"]["resnet20 ours/torch"] = common.goal(
            common.ratio(rates["resnet20"], rates["torch"]), 1.0
        )
    else:
        result["headline"]["resnet20 ours/torch"] = result["torch"]
    common.report(args, result)


if __name__ == "__main__":
    main()
