"""Every user error ends in one line: exit 1, the file, record or flag.

Bad MNIST records, an input shorter than one step, folder flags that name
files, cluster and numeric flags: each is provoked (on the scripts, run as
a user runs them, where it can only be seen there) and the exact line read.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest
import tensorflow as tf
from conftest import (
    error_line,
    run_script,
    start_script,
    trainer_flags,
    wait_for_log,
)

from multigpu import folders
from multigpu.distributed import cluster
from multigpu.run import failures
from multigpu.train_dir import restore


def _write_examples(filename, examples):
    """Writes a TFRecord file of `tf.train.Example`s given as feature dicts.

    Args:
      examples: list of dicts, 'image_raw' -> bytes, 'label' -> int; a key
        left out is a feature left out.
    """
    with tf.io.TFRecordWriter(str(filename)) as writer:
        for example in examples:
            feature = {}
            if "image_raw" in example:
                feature["image_raw"] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[example["image_raw"]])
                )
            if "label" in example:
                feature["label"] = tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[example["label"]])
                )
            writer.write(
                tf.train.Example(
                    features=tf.train.Features(feature=feature)
                ).SerializeToString()
            )


GOOD_EXAMPLE = {"image_raw": bytes(784), "label": 3}


@pytest.mark.parametrize(
    "bad_example, what",
    [
        (
            {"image_raw": bytes(100), "label": 3},
            "image_raw holds 100 bytes, expected 784 (28x28)",
        ),
        (
            {"image_raw": bytes(784), "label": 10},
            "label 10 is out of range, expected 0..9",
        ),
        ({"image_raw": bytes(784)}, "has no label"),
    ],
    ids=["short_image", "label_10", "no_label"],
)
def test_a_bad_mnist_record_is_named_by_file_and_index(
    tmp_path, bad_example, what
):
    import mnist_input

    filename = tmp_path / "train.tfrecords"
    _write_examples(filename, [GOOD_EXAMPLE] * 7 + [bad_example])
    with tf.Graph().as_default():
        images, labels = mnist_input.inputs(
            train=True, batch_size=8, num_epochs=1, data_dir=str(tmp_path)
        )
        with tf.compat.v1.Session() as sess:
            with pytest.raises(ValueError) as error:
                with mnist_input.reading(str(filename)):
                    sess.run(labels)
    assert str(error.value) == (
        "%s, record 7 (from 0): %s; make the file again with mnist_input.py"
        % (filename, what)
    )


def test_an_mnist_file_deleted_during_the_run_is_named(tmp_path):
    import mnist_input

    filename = tmp_path / "train.tfrecords"
    _write_examples(filename, [GOOD_EXAMPLE] * 8)
    with tf.Graph().as_default():
        images, labels = mnist_input.inputs(
            train=True, batch_size=8, num_epochs=None, data_dir=str(tmp_path)
        )
        with tf.compat.v1.Session() as sess:
            sess.run(labels)
            os.remove(str(filename))
            # The input reads ahead; the file is opened again for each pass.
            with pytest.raises(ValueError) as error:
                with mnist_input.reading(str(filename)):
                    for _ in range(1000):
                        sess.run(labels)
    assert str(error.value) == (
        "%s went away during the run; put it back (or make it again with "
        "mnist_input.py) and start the run again, which resumes from its "
        "newest checkpoint" % filename
    )


@pytest.mark.slow
def test_mnist_without_its_test_file_is_refused_before_training(tmp_path):
    _write_examples(tmp_path / "train.tfrecords", [GOOD_EXAMPLE] * 8)
    refused = error_line(
        "mnist_multi_gpu_train.py",
        "--data_dir=%s" % tmp_path,
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert refused.startswith(
        "mnist_multi_gpu_train.py: error: %s not found. Download the four "
        "IDX files" % (tmp_path / "test.tfrecords")
    )
    assert not os.path.exists(str(tmp_path / "train"))


def test_a_batch_too_large_for_memory_is_one_line():
    # TensorFlow's error for --batch_size=100000000 on a CPU. Provoked in a
    # run it takes 5 to 95 s on a shared machine, so it is fed here.
    oom = tf.errors.ResourceExhaustedError(
        None,
        None,
        "Graph execution error:\n\nError in user-defined function passed to"
        " MapDataset:14 transformation with iterator: Iterator::Root::Prefetch"
        "::Map: OOM when allocating tensor with shape[100000000,32,32,3] and "
        "type uint8 on /job:localhost/replica:0/task:0/device:CPU:0 by "
        "allocator mklcpu",
    )
    assert str(failures.out_of_memory(oom)) == (
        "out of memory: a uint8 tensor of shape [100000000,32,32,3] does not "
        "fit on CPU:0; lower --batch_size (examples per tower)"
    )


@pytest.mark.slow
def test_mnist_with_fewer_examples_than_a_step_is_an_error(tmp_path):
    data_dir = tmp_path / "data"
    os.makedirs(str(data_dir))
    for split in ("train", "validation", "test"):
        _write_examples(data_dir / ("%s.tfrecords" % split), [GOOD_EXAMPLE] * 5)
    refused = error_line(
        "mnist_multi_gpu_train.py",
        "--cpu_towers",
        "--num_gpus=2",
        "--batch_size=3",
        "--num_epochs=1",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert refused == (
        "mnist_multi_gpu_train.py: error: %s holds 5 example(s), fewer than "
        "one step takes (--batch_size=3 x 2 tower(s)); nothing was trained"
        % (data_dir / "train.tfrecords")
    )


def test_a_folder_flag_that_is_a_file_or_under_one_is_named(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_bytes(b"mine")
    with pytest.raises(ValueError) as error:
        folders.make_folder(str(a_file), "eval_dir")
    assert str(error.value) == "--eval_dir=%s is a file, not a folder" % a_file
    with pytest.raises(ValueError) as error:
        folders.make_folder(str(a_file / "eval"), "eval_dir")
    assert str(error.value) == (
        "--eval_dir=%s is under %s, which is a file, not a folder"
        % (a_file / "eval", a_file)
    )
    assert a_file.read_bytes() == b"mine"


def test_a_job_name_without_hosts_is_an_error():
    with pytest.raises(ValueError) as error:
        cluster.cluster_task("", "", "worker", 0)
    assert str(error.value) == (
        "--job_name=worker needs --ps_hosts and --worker_hosts (cluster "
        "mode); leave it out to train in this one process"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flags, message",
    [
        (
            "cifar10_train.py",
            ["--train_dir=%(file)s"],
            "cifar10_train.py: error: --train_dir=%(file)s is a file, not a "
            "folder",
        ),
        (
            "cifar10_train.py",
            ["--clip_gradients=nan"],
            "cifar10_train.py: error: flag --clip_gradients=nan: "
            "--clip_gradients must be finite",
        ),
        (
            "cifar10_eval.py",
            ["--eval_interval_secs=0"],
            "cifar10_eval.py: error: flag --eval_interval_secs=0: 0 is not a "
            "positive integer",
        ),
        (
            "cifar10_multi_gpu_train.py",
            ["--learning_rate=nan"],
            "cifar10_multi_gpu_train.py: error: flag --learning_rate=nan: "
            "--learning_rate must be finite",
        ),
        (
            "mnist_multi_gpu_train.py",
            ["--learning_rate=inf"],
            "mnist_multi_gpu_train.py: error: flag --learning_rate=inf: "
            "--learning_rate must be finite",
        ),
        (
            "cifar10_train.py",
            ["--use_fp16", "--fp16_loss_scale=-4"],
            "cifar10_train.py: error: flag --fp16_loss_scale=-4: -4.0 is not "
            "a number >= 1.0",
        ),
        (
            "cifar10_multi_gpu_train.py",
            ["--dry_run", "--use_fp16", "--fp16_loss_scale=nan"],
            "cifar10_multi_gpu_train.py: error: flag --fp16_loss_scale=nan: "
            "--fp16_loss_scale must be finite",
        ),
    ],
    ids=[
        "train_dir_file",
        "clip_nan",
        "eval_interval_0",
        "learning_rate_nan",
        "learning_rate_inf",
        "loss_scale_negative",
        "loss_scale_nan",
    ],
)
def test_a_user_error_exits_1_naming_the_flag_without_a_traceback(
    script, flags, message, cifar10_data_dir, tmp_path
):
    a_file = tmp_path / "notes.txt"
    a_file.write_bytes(b"mine")
    names = {"file": a_file}
    result = run_script(
        script,
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        *[flag % names for flag in flags],
        expect_success=False,
    )
    assert result.returncode == 1
    assert message % names in result.stderr.split("\n")
    assert "Traceback" not in result.stderr
    assert "FATAL" not in result.stderr and "--helpshort" not in result.stderr
    assert a_file.read_bytes() == b"mine"


def test_ctrl_c_while_tensorflow_loads_exits_130_with_one_line(tmp_path):
    log_path = tmp_path / "train.log"
    trainer = start_script(
        "cifar10_train.py", "--train_dir=%s" % tmp_path, log_path=log_path
    )
    # Python starts in well under this; TensorFlow takes seconds to load.
    time.sleep(0.5)
    trainer.send_signal(signal.SIGINT)
    assert trainer.wait(timeout=60) == 130
    assert log_path.read_text().strip().split("\n")[-1] == (
        "cifar10_train.py: interrupted (SIGINT) while starting; nothing was "
        "written"
    )
    assert os.listdir(str(tmp_path)) == ["train.log"]


@pytest.mark.slow
def test_an_eval_given_a_checkpoint_prefix_says_so_instead_of_waiting(
    three_checkpoints,
):
    prefix = three_checkpoints / "model.ckpt-30"
    # Without --run_once the eval would wait for new checkpoints forever.
    line = error_line(
        "cifar10_eval.py",
        "--checkpoint_dir=%s" % prefix,
        "--eval_dir=%s" % (three_checkpoints / "eval"),
    )
    assert line == (
        "cifar10_eval.py: error: --checkpoint_dir=%s is a checkpoint, not a "
        "folder; pass its folder, --checkpoint_dir=%s: the eval scores the "
        "newest checkpoint there (and, without --run_once, each new one)"
        % (prefix, three_checkpoints)
    )


@pytest.fixture
def read_only_folder(tmp_path):
    """An empty folder on a read-only file system (a tmpfs mounted ro).

    Root writes through any file mode, so only a read-only mount stops it.
    Mounting needs root (or CAP_SYS_ADMIN); the test is skipped without.
    """
    folder = tmp_path / "read_only"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip("cannot mount a tmpfs: %s" % mounted.stderr.strip())
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=True)


@pytest.mark.slow
def test_the_evals_fake_data_on_a_read_only_folder_is_one_line(
    read_only_folder, three_checkpoints
):
    line = error_line(
        "cifar10_eval.py",
        "--fake_data",
        "--run_once",
        "--data_dir=%s" % (read_only_folder / "data"),
        "--checkpoint_dir=%s" % three_checkpoints,
        "--eval_dir=%s" % (three_checkpoints / "eval"),
    )
    assert line == (
        "cifar10_eval.py: error: --data_dir=%s cannot be created: Read-only "
        "file system" % (read_only_folder / "data")
    )


@pytest.mark.slow
def test_a_train_dir_deleted_during_the_run_stops_it_with_one_line(
    cifar10_data_dir, tmp_path
):
    train_dir, log_path = tmp_path / "train", tmp_path / "train.log"
    trainer = start_script(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=100000"),
        "--log_frequency=1",
        log_path=log_path,
    )
    try:
        wait_for_log(trainer, log_path, "step 2,", 300)
        shutil.rmtree(str(train_dir))
        assert trainer.wait(timeout=120) == 1
    finally:
        trainer.kill()
        trainer.wait()
    log = log_path.read_text()
    assert "Traceback" not in log
    assert log.strip().split("\n")[-1] == (
        "cifar10_train.py: error: --train_dir=%s went away during the run "
        "(deleted or moved, with its checkpoints and event files); the run "
        "stopped. Start it again, on a folder nothing else deletes: it "
        "starts from step 0" % train_dir
    )
    assert not train_dir.exists()


def test_a_pretrained_folder_of_unreadable_checkpoints_gets_its_own_advice(
    three_checkpoints,
):
    for data in three_checkpoints.glob("model.ckpt-*.data-*"):
        os.truncate(str(data), 2)
    with pytest.raises(ValueError) as error:
        restore.pretrained_checkpoint(str(three_checkpoints))
    assert str(error.value) == (
        "--pretrained_model_checkpoint_path=%s: none of the folder's "
        "checkpoints reads (see the warnings above); pass a folder or a "
        "checkpoint that reads in full" % three_checkpoints
    )
