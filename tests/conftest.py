"""Shared test helpers: running the scripts, and the sample data sets."""

import collections
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from data_sets import cifar10_data

REPO = pathlib.Path(__file__).resolve().parent.parent
# Quiet TensorFlow's C++ logging; see each line of Python output at once.
SCRIPT_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


@pytest.fixture(scope="session", autouse=True)
def scripts_take_ctrl_c():
    """Scripts start with Ctrl-C (SIGINT) enabled, as from a terminal.

    A test run started in the background (`pytest &` in a shell script)
    ignores SIGINT, and every script it starts would inherit that and never
    see the SIGINT a test sends it.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run_script(script, *args, timeout=600, expect_success=True, env=None):
    """Runs one of the suite's scripts in a subprocess, as a user would.

    Scripts define absl flags, so each runs in its own process.

    Args:
      script: file name in the repository, e.g. 'cifar10_train.py'.
      *args: its command-line flags.
      timeout: seconds before the test fails instead of hanging.
      expect_success: assert the exit code is 0 (True) or non-zero (False).
      env: dict of environment variables to set beside SCRIPT_ENV's.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    result = subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(SCRIPT_ENV, **(env or {})),
        cwd=REPO,
    )
    output = "%s\n--- stderr ---\n%s" % (result.stdout, result.stderr[-5000:])
    if expect_success:
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0, output
    return result


def help_words(script):
    """A script's --help, each run of spaces and line breaks made one space.

    absl wraps a flag's help at its own width; a phrase is found whole.
    """
    return " ".join(run_script(script, "--help").stdout.split())


# Worker 0 of a cluster that is never started, on CPU towers and the sample
# set: for what a trainer refuses in cluster mode before it starts a server.
UNSTARTED_WORKER_FLAGS = (
    "--cpu_towers",
    "--ps_hosts=localhost:2222",
    "--worker_hosts=localhost:2223",
    "--job_name=worker",
    "--fake_data",
)


def error_line(script, *flags, env=None):
    """Runs a script that must fail: exit 1, no traceback; its last line."""
    result = run_script(script, *flags, expect_success=False, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stderr.strip().split("\n")[-1]


def start_script(script, *args, log_path, prefix=()):
    """Starts a script in the background, its output going to log_path.

    The caller must end it (`kill`, then `wait`), e.g. in a finally block.
    prefix: the command that runs it, e.g. ('ip', 'netns', 'exec', NAME),
    which execs the script in the same process.

    Returns:
      The `subprocess.Popen`.
    """
    with open(log_path, "w") as log:
        return subprocess.Popen(
            [*prefix, sys.executable, str(REPO / script), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=SCRIPT_ENV,
            cwd=REPO,
        )


def run_snippets(snippet, argvs, timeout):
    """Runs `python -c snippet` once per argv at once; returns exit codes.

    Every process is ended by the end of the call, whatever happens.
    """
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", snippet, *map(str, argv)],
            env=SCRIPT_ENV,
            cwd=REPO,
        )
        for argv in argvs
    ]
    try:
        return [process.wait(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def free_port():
    """A port of 127.0.0.1 that no process listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tensorboard_server(log_path, *flags):
    """Runs TensorBoard with flags on 127.0.0.1, its output going to log_path.

    Yields:
      (the server's `subprocess.Popen`, its port); stopped at the end.
    """
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tensorboard.main",
                *flags,
                "--host=127.0.0.1",
                "--port=%d" % port,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=SCRIPT_ENV,
        )
    try:
        yield server, port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def wait_for_log(process, log_path, text, timeout):
    """Waits until log_path holds text; fails if process ends first.

    Args:
      process: the `subprocess.Popen` writing log_path.
      text: str to wait for, e.g. 'step 10, loss'.
      timeout: seconds before the test fails.
    """
    deadline = time.monotonic() + timeout
    while text not in log_path.read_text():
        assert process.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.fixture(scope="session")
def cifar10_data_dir(tmp_path_factory):
    """A --data_dir holding the built-in CIFAR-10 sample set."""

    data_dir = tmp_path_factory.mktemp("cifar10_data")
    cifar10_data.write_fake_data(str(data_dir))
    return data_dir


def write_cifar10_files(data_dir, records_per_file, seed=0):
    """Writes the six CIFAR-10 record files with random colour images.

    Args:
      data_dir: the --data_dir; the files go to its cifar-10-batches-bin/.
      records_per_file: int.
      seed: int, for the images.

    Returns:
      dict file name -> (uint8 images [n, 32, 32, 3], uint8 labels [n]); the
      labels count on through the files in order: 0, 1, ..., 9, 0, ...
    """
    import cifar10_input

    folder = os.path.join(str(data_dir), cifar10_input.BATCHES_DIR)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = cifar10_input.TRAIN_FILES + cifar10_input.TEST_FILES
    written = {}
    for i, name in enumerate(names):
        images = rng.integers(0, 256, (records_per_file, 32, 32, 3), np.uint8)
        labels = (np.arange(records_per_file) + i * records_per_file) % 10
        cifar10_data.write_records(os.path.join(folder, name), images, labels)
        written[name] = images, labels.astype(np.uint8)
    return written


def training_error(train_op, loss, train_dir, **kwargs):
    """Runs `training.run_training` for 10 steps, which must stop in error.

    Args:
      train_op, loss: of the default graph; loss a float32 scalar.
      train_dir: the folder it writes.
      **kwargs: run_training's other arguments.

    Returns:
      The message of the `errors.TrainingError` it raised.
    """
    from multigpu import errors
    from multigpu.run import training

    with pytest.raises(errors.TrainingError) as error:
        training.run_training(
            train_op,
            loss,
            str(train_dir),
            examples_per_step=1,
            log_frequency=1,
            max_steps=10,
            **kwargs,
        )
    return str(error.value)


def folder_contents(folder):
    """Every file under folder: relative path -> bytes."""
    found = {}
    for root, _, names in os.walk(str(folder)):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, str(folder))] = f.read()
    return found


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


# Small steps: the faults are under test, not the learning. At batches of
# 4 or 8 the tutorial's learning rate of 0.1 diverges now and then within a
# few hundred steps; clipping the gradients' norm keeps every run finite.
BATCH_SIZE = 4
CLIP_FLAG = "--clip_gradients=5"


def trainer_flags(data_dir, train_dir, *flags):
    """The trainer's flags; a flag in `flags` wins over these (absl)."""
    return [
        "--fake_data",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=%d" % BATCH_SIZE,
        "--log_frequency=1000",
        CLIP_FLAG,
        *flags,
    ]


def checkpoint_steps(train_dir):
    """The global steps of the checkpoints listed in train_dir, oldest first."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(train_dir))
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


def read_events(logdir):
    """Loads every scalar and histogram of the event files in logdir.

    Returns:
      A reloaded TensorBoard `EventAccumulator`: `.Tags()`,
      `.Scalars(tag)`, `.Histograms(tag)`.
    """
    from tensorboard.backend.event_processing import event_accumulator

    events = event_accumulator.EventAccumulator(
        str(logdir),
        size_guidance={
            event_accumulator.SCALARS: 0,
            event_accumulator.HISTOGRAMS: 0,
        },
    )
    events.Reload()
    return events


# The checkpoint's name of a variable's moving average: its own + this.
SHADOW = "/ExponentialMovingAverage"


def assert_values_kept(source, started, names, fresh=()):
    """started holds source's value of each of names, but of those in fresh.

    Args:
      source, started: dict name -> array, e.g. of two checkpoints.
      names: the names to compare.
      fresh: the names whose value must differ from source's (started anew).
    """
    for name in names:
        if name in fresh:
            assert not np.allclose(started[name], source[name]), name
        else:
            np.testing.assert_array_equal(started[name], source[name], name)


def eval_scores_in_numpy(
    checkpoint, data_dir, model_name, examples, batch_size
):
    """Precision @ 1 and recall @ 5 of a checkpoint, counted in NumPy.

    The model's logits on the first `examples` test examples, with every
    variable set to the moving average (shadow) the checkpoint holds for it;
    a label is among the top k when fewer than k logits exceed its own
    (TensorFlow's in_top_k counts ties as hits).

    Returns:
      (float, float), precision @ 1 and recall @ 5.
    """
    import tensorflow as tf

    from cifar10_models import registry
    from data_sets import cifar10_batches
    from multigpu.run import checkpoints

    reader = tf.train.load_checkpoint(checkpoint)
    with tf.Graph().as_default():
        images, labels, init_op = cifar10_batches.eval_inputs(
            "test", str(data_dir), batch_size, examples
        )
        logits = registry.logits(
            registry.model(model_name), images, False, tf.float32
        )
        shadows = [
            variable.assign(
                reader.get_tensor(checkpoints.saved_name(variable) + SHADOW)
            )
            for variable in tf.compat.v1.global_variables()
        ]
        with tf.compat.v1.Session() as sess:
            sess.run([init_op, shadows])
            batches = [
                sess.run([logits, labels])
                for _ in range(examples // batch_size)
            ]
    all_logits = np.concatenate([batch[0] for batch in batches])
    all_labels = np.concatenate([batch[1] for batch in batches])
    own = all_logits[np.arange(examples), all_labels]
    above = np.sum(all_logits > own[:, np.newaxis], axis=1)
    return np.mean(above < 1), np.mean(above < 5)


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


def remapper_fuses_bfloat16():
    """Whether Grappler's remapper fuses bfloat16 convolutions on this CPU.

    It does where oneDNN computes bfloat16 (TensorFlow's
    IsBF16SupportedByOneDNNOnThisCPU: AVX-512 or AVX-NE-CONVERT); on a CPU
    with AVX2 alone the ops stay apart.
    """
    from benchmarks import machine

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
