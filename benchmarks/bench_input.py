"""Input pipelines alone: images/s and CPU time per image of the readers.

Run it from the repository root:
  python -m benchmarks.bench_input [--batches=200] [--rounds=3]

CIFAR-10: `cifar10_batches.distorted_dataset` over the binary records of the
built-in sample set (`write_fake_data`), as shipped, against a plain
per-image reference built here: the records cached and shuffled, then one
map (AUTOTUNE) that decodes and distorts each image with the tutorial's own
ops (`tf.image.random_crop`, `random_flip_left_right`, `random_brightness`,
`random_contrast`, `per_image_standardization`), then batched. The goal is
the shipped input at no more than a third of the reference's CPU time per
image (process CPU seconds, all threads). Also the shipped dataset with a
private tf.data threadpool of 1 and 2 threads. MNIST: `mnist_input.dataset`
(training split, shuffled) over its sample set's TFRecords, when the module
is there. Each variant first reads one epoch untimed (caches filled), and
each batch is taken in a graph-mode session by running a group of the
iterator's outputs, so no batch is copied to Python. A round times 200
batches: what the parallel maps and prefetch buffers read ahead while
other variants ran (work whose CPU time no round counts) stays a few
percent of it.
"""

import math
import os

import tensorflow as tf

import cifar10_input
from benchmarks import common
from data_sets import cifar10_batches, mnist_data

NAME = "input"
PRIVATE_THREADS = (1, 2)  # tf.data private threadpool sizes to try.
MNIST_DATA_DIR = os.path.join(common.RESULTS_DIR, "mnist_data")
# The goal: the reference's CPU time per image over the shipped input's.
CPU_TIME_GOAL = 3.0


def tutorial_distortions(image):
    """The tutorial's training distortions of one image, its own tf ops.

    Args:
      image: uint8 [32, 32, 3].

    Returns:
      float32 [24, 24, 3].
    """
    size = cifar10_input.IMAGE_SIZE
    image = tf.cast(image, tf.float32)
    image = tf.image.random_crop(image, [size, size, cifar10_input.DEPTH])
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_brightness(
        image, max_delta=cifar10_input.MAX_BRIGHTNESS_DELTA
    )
    image = tf.image.random_contrast(
        image, cifar10_input.CONTRAST_LOWER, cifar10_input.CONTRAST_UPPER
    )
    return tf.image.per_image_standardization(image)


def per_image_reference(data_dir, batch_size):
    """A plain per-image training input: one map call per record.

    Returns:
      A `tf.data.Dataset` of (float32 [batch_size, 24, 24, 3], int32).
    """
    filenames = cifar10_input.data_files(data_dir)
    num_records = cifar10_input.check_files(filenames)
    buffer_size = int(
        num_records * cifar10_input.MIN_FRACTION_OF_EXAMPLES_IN_QUEUE
    )
    dataset = cifar10_input.read_records(filenames).cache().repeat()
    dataset = dataset.shuffle(buffer_size)

    def distort(record):
        image, label = cifar10_input.decode_record(record)
        return tutorial_distortions(image), label

    dataset = dataset.map(distort, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(
        tf.data.AUTOTUNE
    )


def with_private_threadpool(dataset, threads):
    """The dataset on a private tf.data threadpool of `threads` threads."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return dataset.with_options(options)


def dataset_variant(make_dataset, batches, batch_size, warmup=0):
    """Returns a variant for `interleave`: `batches` batches of a dataset.

    Args:
      make_dataset: callable() -> `tf.data.Dataset`, called in a new graph.
      batches: int, batches timed per round.
      batch_size: int, examples per batch.
      warmup: int, batches read once, untimed, before the first round.
    """
    graph = tf.Graph()
    with graph.as_default():
        next_batch = tf.compat.v1.data.make_one_shot_iterator(
            make_dataset()
        ).get_next()
        # IteratorGetNext is stateful: the group runs it, copying nothing.
        take = tf.group(next_batch)
    sess = tf.compat.v1.Session(graph=graph)
    common.run_steps(sess, take, warmup)

    def run():
        common.run_steps(sess, take, common.WARMUP_STEPS)
        return common.timed(
            lambda: common.run_steps(sess, take, batches), batches * batch_size
        )

    return run


def mnist_variants(batches, batch_size):
    """The MNIST reader's variants, or a reason why there are none.

    Returns:
      (dict name -> variant, str or None): the reason is set when
      `mnist_input` cannot be imported or lacks what is measured.
    """
    try:
        import mnist_input
    except ImportError as e:
        return {}, "not available: mnist_input cannot be imported (%s)" % e
    if not hasattr(mnist_input, "dataset"):
        return {}, "not available: mnist_input has no dataset()"
    mnist_data.write_fake_data(MNIST_DATA_DIR)

    def make_dataset():
        return mnist_input.dataset(
            MNIST_DATA_DIR, "train", batch_size, None, training=True
        )

    variants = {"mnist_dataset": dataset_variant(make_dataset, batches, 128)}
    for threads in PRIVATE_THREADS:
        variants["mnist_private_threads_%d" % threads] = dataset_variant(
            lambda t=threads: with_private_threadpool(make_dataset(), t),
            batches,
            batch_size,
        )
    return variants, None


def _variants(data_dir, batch_size, batches):
    """{name: variant} of every pipeline, as `dataset_variant` makes them,
    and why MNIST's is missing, or None."""
    epoch = math.ceil(
        cifar10_input.check_files(cifar10_input.data_files(data_dir))
        / batch_size
    )

    def shipped():
        return cifar10_batches.distorted_dataset(data_dir, batch_size)

    variants = {
        "cifar10_distorted_dataset": shipped,
        "cifar10_per_image_reference": lambda: per_image_reference(
            data_dir, batch_size
        ),
    }
    for threads in PRIVATE_THREADS:
        variants["cifar10_private_threads_%d" % threads] = lambda t=threads: (
            with_private_threadpool(shipped(), t)
        )
    variants = {
        name: dataset_variant(make, batches, batch_size, epoch)
        for name, make in variants.items()
    }
    mnist, mnist_reason = mnist_variants(batches, batch_size)
    variants.update(mnist)
    return variants, mnist_reason


def _headline(rates, mnist_reason):
    """The report's headline of the measured rates."""
    ours = rates["cifar10_distorted_dataset"]
    reference = rates["cifar10_per_image_reference"]
    versus = common.ratio(ours, reference)
    headline = {
        "CIFAR-10 per-image reference / distorted_dataset, CPU time per "
        "image": common.goal(
            {"value": versus["cpu"], "basis": "per CPU second"},
            CPU_TIME_GOAL,
        ),
        "CIFAR-10 distorted_dataset / per-image reference, wall": versus[
            "wall"
        ],
        "CIFAR-10 distorted_dataset images/s": ours["rate"],
        "CIFAR-10 distorted_dataset CPU us/image": round(
            1e6 / ours["cpu_rate"], 1
        ),
        "CIFAR-10 per-image reference CPU us/image": round(
            1e6 / reference["cpu_rate"], 1
        ),
        "MNIST dataset images/s": mnist_reason
        or rates["mnist_dataset"]["rate"],
    }
    for threads in PRIVATE_THREADS:
        name = "cifar10_private_threads_%d" % threads
        headline["CIFAR-10 private threadpool %d / shipped, wall" % threads] = (
            common.ratio(rates[name], ours)["wall"]
        )
    return headline


def main():
    """Measures every pipeline variant interleaved and reports the rates."""
    args = common.parse_args(NAME, __doc__, batches=200)
    batch_size = common.BATCH_SIZE
    variants, mnist_reason = _variants(
        common.cifar10_data_dir(), batch_size, args.batches
    )
    rates = common.interleave(variants, args.rounds)
    common.report(
        args,
        {
            "unit": "images/s",
            "batch_size": batch_size,
            "batches": args.batches,
            "rates": rates,
            "mnist": mnist_reason or "measured",
            "headline": _headline(rates, mnist_reason),
        },
    )


if __name__ == "__main__":
    main()
