"""The one device's model of a 2-byte gradient transfer, held to the ring.

A transfer cell of the equivalence runner (verification/equivalence.py) holds
the workers' --gradient_transfer_dtype=float16 or bfloat16 to one device
that rounds its slices' gradients as TensorFlow's ring does
(verification/equivalence_transfer.py). Here that model against the runtime's
own CollectiveReduceV2 on virtual CPU devices of this process, bit for bit,
and the model's rounding against the roundings a wrong transfer would do.
"""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from multigpu.graph import placement
from verification import (
    equivalence_table,
    equivalence_transfer,
    equivalence_workers,
)

# Sizes of the gradients of the runner's models, sizes whose chunks end off
# the 64-byte alignment (3, 10, 33) and on it (128, 384: a block more).
SIZES = (1, 3, 10, 33, 64, 128, 384, 4801)


def _runtime_means(values, transfer_dtype):
    """Per size, device 0's CollectiveReduceV2 mean of the float32 values
    (each [devices, n]) cast to transfer_dtype, cast back."""
    devices = placement.tower_devices(len(values[0]), cpu_towers=True)
    with tf.Graph().as_default():
        means = []
        for instance_key, per_device in enumerate(values, start=1):
            for device, value in zip(devices, per_device):
                with tf.device(device):
                    mean = tf.raw_ops.CollectiveReduceV2(
                        input=tf.cast(tf.constant(value), transfer_dtype),
                        group_size=len(devices),
                        group_key=1,
                        instance_key=instance_key,
                        ordering_token=[],
                        merge_op="Add",
                        final_op="Div",
                        communication_hint="ring",
                    )
                    means.append(tf.cast(mean, tf.float32))
        config = placement.session_config(devices)
        with tf.compat.v1.Session(config=config) as sess:
            return sess.run(means)[:: len(devices)]


def _gradients(num_devices, seed=0):
    """Per size, float32 [devices, n] of gradients' magnitudes, 1e-3 to 1
    (float16's subnormals, under 6.1e-5, sum exactly in any order)."""
    rng = np.random.default_rng(seed)
    return [
        (rng.normal(size=(num_devices, n)) * 10.0 ** rng.uniform(-3, 0)).astype(
            np.float32
        )
        for n in SIZES
    ]


@pytest.mark.parametrize("transfer_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("num_devices", [2, 4])
def test_the_ring_model_is_bit_equal_to_the_runtimes_all_reduce(
    transfer_dtype, num_devices
):
    values = _gradients(num_devices)

    expected = _runtime_means(values, transfer_dtype)

    for value, mean in zip(values, expected):
        got = equivalence_transfer.ring_mean(value, transfer_dtype)
        assert got.dtype == np.float32
        assert got.tobytes() == mean.tobytes(), value.shape


def test_a_ring_of_four_sums_each_chunk_from_its_own_device_in_turn():
    # 1 + 2048 is 2049, which float16 rounds to 2048 (its ulp is 2 there):
    # the order of the sum shows. One value per device, so chunk 0 holds it.
    values = np.array([[2048.0], [1.0], [1.0], [-2048.0]], np.float32)

    # ((2048 + 1) + 1) - 2048 rounds to 0, then / 4.
    assert equivalence_transfer.ring_mean(values, "float16").tolist() == [0.0]
    # In float32, or summed before the rounding: 2 / 4.
    assert values.mean(axis=0).tolist() == [0.5]


def test_rounding_after_the_sum_lands_elsewhere_than_before_it():
    [values] = _gradients(2)[-1:]

    before = equivalence_transfer.ring_mean(values, "float16")
    after = values.mean(axis=0).astype(np.float16).astype(np.float32)

    # Measured: 1,863 of the 4,801 means a float16 ulp apart.
    assert np.count_nonzero(before != after) > 100


def test_a_chunk_rounds_up_to_whole_64_byte_blocks():
    # 33 values on 4 devices: 9 each, 18 bytes of float16, up to 64 bytes.
    assert equivalence_transfer.chunk_elements(33, 4, 2) == 32
    # 384 on 4: 96 each, 192 bytes, already 3 blocks: the runtime adds one.
    assert equivalence_transfer.chunk_elements(384, 4, 2) == 128
    assert equivalence_transfer.NUMPY_DTYPES["bfloat16"] == ml_dtypes.bfloat16


def test_a_transfer_cell_has_its_own_one_device_apart_from_float32():
    case = equivalence_table.Case(
        equivalence_workers.UPDATE,
        "collective_float16",
        "tutorial",
        "float32",
        2,
    )

    assert equivalence_workers.transfer_dtype(case) == "float16"
    assert (
        equivalence_workers.transfer_dtype(
            case._replace(all_reduce="collective")
        )
        == "float32"
    )
    assert (
        equivalence_workers.transfer_dtype(
            case._replace(update="replicated", all_reduce="collective")
        )
        == "float32"
    )
