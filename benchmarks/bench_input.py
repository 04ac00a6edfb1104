"""Input pipelines alone: images/s of the CIFAR-10 and MNIST readers.

Run it from the repository root:
  python -m benchmarks.bench_input [--batches=40] [--rounds=3]

CIFAR-10: `cifar10_input.distorted_dataset` over the binary records of the
built-in sample set (`write_fake_data`), as shipped (map with AUTOTUNE), and
the same stages (`read_records`, `decode_record`, `distort_image`) with the
map's num_parallel_calls at 1, 2 and AUTOTUNE, and the shipped dataset with
a private tf.data threadpool of 1 and 2 threads. MNIST: `mnist_input.dataset`
(training split, shuffled) over its sample set's TFRecords, when the module
is there. Each batch is taken in a graph-mode session by running a group of
the iterator's outputs, so no batch is copied to Python.
"""

import os

import tensorflow as tf

import cifar10_input
from benchmarks import common

NAME = "input"
PARALLEL_CALLS = {"1": 1, "2": 2, "autotune": tf.data.AUTOTUNE}
PRIVATE_THREADS = (1, 2)  # tf.data private threadpool sizes to try.
MNIST_DATA_DIR = os.path.join(common.RESULTS_DIR, "mnist_data")


def cifar10_pipeline(data_dir, batch_size, num_parallel_calls):
    """The stages of `distorted_dataset` with a chosen map parallelism.

    Returns:
      A `tf.data.Dataset` of (float32 [batch_size, 24, 24, 3], int32).
    """
    filenames = cifar10_input.data_files(data_dir)
    num_records = cifar10_input.check_files(filenames)
    buffer_size = int(
        num_records * cifar10_input.MIN_FRACTION_OF_EXAMPLES_IN_QUEUE
    )
    dataset = cifar10_input.read_records(filenames).cache().repeat()
    dataset = dataset.shuffle(max(buffer_size, batch_size))

    def distort(record):
        image, label = cifar10_input.decode_record(record)
        return cifar10_input.distort_image(image), label

    dataset = dataset.map(distort, num_parallel_calls=num_parallel_calls)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(
        tf.data.AUTOTUNE
    )


def with_private_threadpool(dataset, threads):
    """The dataset on a private tf.data threadpool of `threads` threads."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    return dataset.with_options(options)


def dataset_variant(make_dataset, batches, batch_size):
    """Returns a variant for `interleave`: `batches` batches of a dataset.

    Args:
      make_dataset: callable() -> `tf.data.Dataset`, called in a new graph.
      batches: int, batches timed per round.
      batch_size: int, examples per batch.
    """
    graph = tf.Graph()
    with graph.as_default():
        next_batch = tf.compat.v1.data.make_one_shot_iterator(
            make_dataset()
        ).get_next()
        # IteratorGetNext is stateful: the group runs it, copying nothing.
        take = tf.group(next_batch)
    sess = tf.compat.v1.Session(graph=graph)

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
    mnist_input.write_fake_data(MNIST_DATA_DIR)

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


def main():
    """Measures every pipeline variant interleaved and reports the rates."""
    args = common.parse_args(NAME, __doc__, batches=40)
    data_dir = common.cifar10_data_dir()
    batch_size = common.BATCH_SIZE

    def shipped():
        return cifar10_input.distorted_dataset(data_dir, batch_size)

    variants = {"cifar10_distorted_dataset": shipped}
    for name, calls in PARALLEL_CALLS.items():
        variants["cifar10_parallel_calls_" + name] = lambda c=calls: (
            cifar10_pipeline(data_dir, batch_size, c)
        )
    for threads in PRIVATE_THREADS:
        variants["cifar10_private_threads_%d" % threads] = lambda t=threads: (
            with_private_threadpool(shipped(), t)
        )
    variants = {
        name: dataset_variant(make, args.batches, batch_size)
        for name, make in variants.items()
    }
    mnist, mnist_reason = mnist_variants(args.batches, batch_size)
    variants.update(mnist)
    rates = common.interleave(variants, args.rounds)
    serial = rates["cifar10_parallel_calls_1"]
    headline = {
        "CIFAR-10 distorted_dataset images/s": rates[
            "cifar10_distorted_dataset"
        ]["rate"],
        "MNIST dataset images/s": rates["mnist_dataset"]["rate"]
        if mnist
        else mnist_reason,
    }
    # Parallelism changes the wall time, not the work: compare wall rates.
    for name in ("2", "autotune"):
        headline["CIFAR-10 parallel calls %s / 1, wall" % name] = common.ratio(
            rates["cifar10_parallel_calls_" + name], serial
        )["wall"]
    for threads in PRIVATE_THREADS:
        name = "cifar10_private_threads_%d" % threads
        headline["CIFAR-10 private threadpool %d / shipped, wall" % threads] = (
            common.ratio(rates[name], rates["cifar10_distorted_dataset"])[
                "wall"
            ]
        )
    common.report(
        args,
        {
            "unit": "images/s",
            "batch_size": batch_size,
            "batches": args.batches,
            "rates": rates,
            "mnist": mnist_reason or "measured",
            "headline": headline,
        },
    )


if __name__ == "__main__":
    main()
