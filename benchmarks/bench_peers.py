"""Our training graph vs Keras 3 `fit` and PyTorch, same net, same data.

Run it from the repository root (PyTorch from the `bench` extra:
`pip install -e ".[bench]"`; without it the PyTorch entry says so):
  python -m benchmarks.bench_peers [--steps=8] [--rounds=3]

The net of the tutorial in all three: conv 5x5x3x64 - relu - max-pool 3x3/2
- LRN(4, 1, 0.001/9, 0.75) - conv 5x5x64x64 - relu - LRN - max-pool - fc
384 relu - fc 192 relu - fc 10; softmax cross-entropy; plain SGD at 0.1;
batch 128 of 24x24x3 images; one fixed random batch (synthetic data) for
all three, so that only the training step is compared.
- ours: the one-device graph of cifar10_train.py (cifar10.inference, loss,
  train: it also updates the moving averages and adds weight decay).
- keras: a `keras.Sequential` with LRN as a Lambda of
  tf.nn.local_response_normalization, `fit` on a dataset repeating the
  batch (Keras's defaults: no XLA on a CPU-only machine).
- torch: an `nn.Sequential` (NCHW, `nn.LocalResponseNorm(9, alpha=0.001)`
  is the same normalisation: torch divides alpha by the window size).
Goals: ours >= 1.15x Keras, >= 2.5x PyTorch.
"""

import numpy as np
import tensorflow as tf

import cifar10
from benchmarks import common

NAME = "peers"
FILTERS, LOCAL3, LOCAL4 = 64, 384, 192
LRN_WINDOW = 2 * cifar10.LRN_DEPTH_RADIUS + 1  # 9 channels


def keras_variant(steps, batch_size):
    """Returns a variant for `interleave`: the tutorial's net in Keras."""
    import keras

    layers = keras.layers

    def lrn(x):
        return tf.nn.local_response_normalization(
            x,
            cifar10.LRN_DEPTH_RADIUS,
            cifar10.LRN_BIAS,
            cifar10.LRN_ALPHA,
            cifar10.LRN_BETA,
        )

    model = keras.Sequential(
        [
            keras.Input((cifar10.IMAGE_SIZE, cifar10.IMAGE_SIZE, 3)),
            layers.Conv2D(FILTERS, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(3, 2, padding="same"),
            layers.Lambda(lrn),
            layers.Conv2D(FILTERS, 5, padding="same", activation="relu"),
            layers.Lambda(lrn),
            layers.MaxPooling2D(3, 2, padding="same"),
            layers.Flatten(),
            layers.Dense(LOCAL3, activation="relu"),
            layers.Dense(LOCAL4, activation="relu"),
            layers.Dense(cifar10.NUM_CLASSES),
        ]
    )
    optimizer = keras.optimizers.SGD(cifar10.INITIAL_LEARNING_RATE)
    return keras_fit_variant(model, optimizer, steps, batch_size)


def keras_fit_variant(model, optimizer, steps, batch_size):
    """Returns a variant for `interleave`: `steps` steps of Keras `fit`.

    The model is compiled with optimizer and the softmax cross-entropy,
    and fed the fixed batch. Each round calls `fit` for WARMUP_STEPS + steps
    steps; a callback times the last `steps` (so the per-call set-up of
    `fit` is left out).
    """
    import keras

    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    images, labels = synthetic_arrays(batch_size)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()

    class Clock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stopwatch = common.Stopwatch()

        def on_train_batch_end(self, batch, logs=None):
            if batch == common.WARMUP_STEPS - 1:
                self.stopwatch.start()
            elif batch == common.WARMUP_STEPS + steps - 1:
                self.result = self.stopwatch.stop(steps * batch_size)

    def run():
        clock = Clock()
        model.fit(
            dataset,
            epochs=1,
            steps_per_epoch=common.WARMUP_STEPS + steps,
            verbose=0,
            shuffle=False,
            callbacks=[clock],
        )
        return clock.result

    return run


def torch_variant(steps, batch_size):
    """Returns a variant for `interleave`: `steps` PyTorch training steps.

    Raises:
      ImportError: PyTorch is not installed.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    lrn = dict(size=LRN_WINDOW, alpha=LRN_WINDOW * cifar10.LRN_ALPHA)
    lrn.update(beta=cifar10.LRN_BETA, k=cifar10.LRN_BIAS)
    flat = FILTERS * (cifar10.IMAGE_SIZE // 4) ** 2  # 64 x 6 x 6 = 2304
    model = nn.Sequential(
        nn.Conv2d(3, FILTERS, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, padding=1),
        nn.LocalResponseNorm(**lrn),
        nn.Conv2d(FILTERS, FILTERS, 5, padding=2),
        nn.ReLU(),
        nn.LocalResponseNorm(**lrn),
        nn.MaxPool2d(3, 2, padding=1),
        nn.Flatten(),
        nn.Linear(flat, LOCAL3),
        nn.ReLU(),
        nn.Linear(LOCAL3, LOCAL4),
        nn.ReLU(),
        nn.Linear(LOCAL4, cifar10.NUM_CLASSES),
    )
    opt = torch.optim.SGD(model.parameters(), lr=cifar10.INITIAL_LEARNING_RATE)
    return torch_train_variant(model, opt, steps, batch_size)


def torch_train_variant(model, opt, steps, batch_size):
    """Returns (variant for `interleave`, torch version, torch threads).

    `steps` PyTorch steps of model and opt on the fixed batch, after
    WARMUP_STEPS untimed ones, the cross-entropy as the loss.
    """
    import torch
    from torch import nn

    images, labels = synthetic_arrays(batch_size)
    # [batch, 24, 24, 3] -> [batch, 3, 24, 24]: torch convolves NCHW.
    images = torch.from_numpy(images.transpose(0, 3, 1, 2).copy())
    labels = torch.from_numpy(labels.astype(np.int64))

    def train_steps(count):
        for _ in range(count):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()

    def run():
        train_steps(common.WARMUP_STEPS)
        return common.timed(lambda: train_steps(steps), steps * batch_size)

    return run, torch.__version__, torch.get_num_threads()


def synthetic_arrays(batch_size):
    """The fixed random batch: float32 [batch, 24, 24, 3], int32 [batch]."""
    shape = (batch_size, cifar10.IMAGE_SIZE, cifar10.IMAGE_SIZE, 3)
    images = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    labels = np.arange(batch_size, dtype=np.int32) % cifar10.NUM_CLASSES
    return images, labels


def main():
    """Measures ours, Keras and PyTorch interleaved; reports the ratios."""
    args = common.parse_args(NAME, __doc__, steps=8)
    batch_size = common.BATCH_SIZE
    ours = common.one_device_graph(common.synthetic_input, batch_size)
    variants = {
        "ours": common.train_variant(ours, args.steps),
        "keras": keras_variant(args.steps, batch_size),
    }
    result = {"unit": "examples/s", "batch_size": batch_size, "steps": 0}
    result["steps"] = args.steps
    try:
        variants["torch"], version, threads = torch_variant(
            args.steps, batch_size
        )
        result["torch"] = {"version": version, "threads": threads}
    except ImportError as e:
        result["torch"] = "not available: %s" % e
    rates = common.interleave(variants, args.rounds)
    result["rates"] = rates
    vs_keras = common.ratio(rates["ours"], rates["keras"])
    result["headline"] = {"ours/keras": common.goal(vs_keras, 1.15)}
    if "torch" in rates:
        vs_torch = common.ratio(rates["ours"], rates["torch"])
        result["headline"]["ours/torch"] = common.goal(vs_torch, 2.5)
    else:
        result["headline"]["ours/torch"] = result["torch"]
    common.report(args, result)


if __name__ == "__main__":
    main()
