"""Shared fixtures, and the helpers of tests/helpers/ under their old names.

Test files import helpers from here (`from conftest import run_script`) or
from their module (`from helpers.scripts import run_script`), never from
another test file.
"""

import collections
import os
import signal
import subprocess

import pytest

pytest.register_assert_rewrite("helpers")

from helpers.bfloat16 import (  # noqa: E402, F401
    bfloat16_conv_graph,
    remapper_fuses_bfloat16,
)
from helpers.checkpoints import (  # noqa: E402, F401
    SHADOW,
    assert_values_kept,
    checkpoint_steps,
    eval_scores_in_numpy,
)
from helpers.cluster import SCRIPT, Cluster  # noqa: E402
from helpers.events import read_events  # noqa: E402, F401
from helpers.output_lines import help_words  # noqa: E402, F401
from helpers.scripts import (  # noqa: E402, F401
    REPO,
    SCRIPT_ENV,
    UNSTARTED_WORKER_FLAGS,
    error_line,
    free_port,
    run_script,
    run_snippets,
    start_script,
    tensorboard_server,
    wait_for_log,
)
from helpers.training import (  # noqa: E402, F401
    BATCH_SIZE,
    CLIP_FLAG,
    trainer_flags,
    training_error,
)

from data_sets import cifar10_data  # noqa: E402
from verification.data_files import (  # noqa: E402, F401
    folder_contents,
    write_cifar10_files,
)


def pytest_configure(config):
    """Drops what TensorFlow's C++ side printed as this file imported it.

    Its start-up notices (no CUDA driver, the CPU's instructions) land in
    pytest's capture of the start; a process that runs tests hands them to
    its first test, but the controller of `-n 2`, which runs none, would
    print them after the summary.
    """
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.read_global_capture()


@pytest.fixture(scope="session", autouse=True)
def scripts_take_ctrl_c():
    """Scripts start with Ctrl-C (SIGINT) enabled, as from a terminal.

    A test run started in the background (`pytest &` in a shell script)
    ignores SIGINT, and every script it starts would inherit that and never
    see the SIGINT a test sends it.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def cifar10_data_dir(tmp_path_factory):
    """A --data_dir holding the built-in CIFAR-10 sample set."""

    data_dir = tmp_path_factory.mktemp("cifar10_data")
    cifar10_data.write_fake_data(str(data_dir))
    return data_dir


@pytest.fixture
def twenty_records_dir(tmp_path):
    """A --data_dir of 20 random records per file, in the binary format."""
    write_cifar10_files(tmp_path / "data", records_per_file=20)
    return tmp_path / "data"


@pytest.fixture
def small_disk(tmp_path):
    """Mounts a tmpfs of a size (e.g. '30M') at tmp_path/disk: a full disk.

    Mounting needs root (or CAP_SYS_ADMIN); the test is skipped without.
    """
    disk = tmp_path / "disk"
    disk.mkdir()

    def mount(size):
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", str(disk)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode:
            pytest.skip("cannot mount a tmpfs: %s" % mounted.stderr.strip())
        return disk

    yield mount
    if os.path.ismount(str(disk)):
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.fixture
def three_checkpoints(tmp_path):
    """tmp_path holding checkpoints of steps 10, 20 and 30 of one variable."""
    import tensorflow as tf

    with tf.Graph().as_default():
        tf.compat.v1.get_variable("weights", initializer=tf.range(1000.0))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for step in (10, 20, 30):
                global_step.load(step, sess)
                saver.save(sess, str(tmp_path / "model.ckpt"), step)
    return tmp_path


# The eval-beside-training run of test_faults.py and test_tensorboard.py: a
# checkpoint every step, so that the trainer deletes its oldest (max_to_keep
# 5) while the eval loop picks and restores them.
WATCHED_MAX_STEPS = 200

WatchedTraining = collections.namedtuple(
    "WatchedTraining", "train_dir eval_dir eval_log eval_returncode"
)


@pytest.fixture(scope="session")
def watched_training(cifar10_data_dir, tmp_path_factory):
    """Trains with a checkpoint every step while cifar10_eval.py scores them.

    The eval loop ends once it has scored the last checkpoint (--last_step).
    """
    root = tmp_path_factory.mktemp("watched")
    train_dir, eval_dir = root / "train", root / "eval"
    evaluator = start_script(
        "cifar10_eval.py",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % eval_dir,
        "--eval_interval_secs=1",
        "--num_examples=100",
        "--batch_size=50",
        "--last_step=%d" % WATCHED_MAX_STEPS,
        log_path=root / "eval.log",
    )
    try:
        run_script(
            "cifar10_train.py",
            "--fake_data",
            "--data_dir=%s" % cifar10_data_dir,
            "--train_dir=%s" % train_dir,
            "--batch_size=4",
            # Batches of 4 at the tutorial's learning rate diverge now and
            # then; clipping the gradients' norm keeps the run finite.
            "--clip_gradients=5",
            "--max_steps=%d" % WATCHED_MAX_STEPS,
            "--save_checkpoint_steps=1",
        )
        evaluator.wait(timeout=120)
    finally:
        evaluator.kill()
        evaluator.wait()
    return WatchedTraining(
        train_dir,
        eval_dir,
        (root / "eval.log").read_text(),
        evaluator.returncode,
    )


@pytest.fixture
def make_cluster(tmp_path, cifar10_data_dir):
    clusters = []

    def make(num_workers, *flags, script=SCRIPT, num_ps=1):
        if script == SCRIPT:
            flags = (
                "--fake_data",
                "--data_dir=%s" % cifar10_data_dir,
                "--batch_size=16",
                "--log_frequency=5",
                *flags,
            )
        clusters.append(
            Cluster(tmp_path, script, num_workers, *flags, num_ps=num_ps)
        )
        return clusters[-1]

    yield make
    for each in clusters:
        each.stop_all()
