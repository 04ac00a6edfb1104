"""The CIFAR-10 model's sizes, counted by hand from its layers."""

# The CIFAR-10 model's parameters, layer by layer (weights + biases).
CIFAR10_PARAMETERS = (
    (5 * 5 * 3 * 64 + 64)  # conv1
    + (5 * 5 * 64 * 64 + 64)  # conv2
    + (2304 * 384 + 384)  # local3
    + (384 * 192 + 192)  # local4
    + (192 * 10 + 10)  # softmax_linear
)
FLOAT32_BYTES = INT32_BYTES = 4


def cifar10_batch_bytes(batch):
    return batch * 24 * 24 * 3 * FLOAT32_BYTES + batch * INT32_BYTES
