"""mnist_multi_gpu_train.py end to end, on virtual CPU towers."""

import ast
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, help_words, run_script
from helpers.mnist_files import record_offset
from tensorboard.backend.event_processing import event_accumulator

import mnist_model
from data_sets import mnist_data

NUM_TOWERS = 2
PER_TOWER_BATCH = 11
NUM_EPOCHS = 3
LEARNING_RATE = 0.01
# The last partial step is dropped: floor(3000 * 3 / 22) = 409 steps.
EXPECTED_STEPS = (
    mnist_data.FAKE_SPLIT_SIZES["train"]
    * NUM_EPOCHS
    // (PER_TOWER_BATCH * NUM_TOWERS)
)
# Chance is 0.1, and so is the score of a pipeline that detaches labels
# from images or of a network whose 10 local4 ReLUs all died. This setting
# scored 0.932 to 1.0 in the runs seen; 0.5 leaves room for a slow start.
MIN_ACCURACY = 0.5


@pytest.fixture(scope="module")
def mnist_data_dir(tmp_path_factory):
    """A --data_dir holding the built-in MNIST sample set."""
    data_dir = tmp_path_factory.mktemp("mnist_data")
    mnist_data.write_fake_data(str(data_dir))
    return data_dir


@pytest.fixture(scope="module")
def two_tower_run(mnist_data_dir, tmp_path_factory):
    """Trains 2 towers for 3 epochs; returns (train_dir, stdout)."""
    train_dir = tmp_path_factory.mktemp("mnist_train")
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--fake_data",
        "--num_gpus=%d" % NUM_TOWERS,
        "--cpu_towers",
        "--num_epochs=%d" % NUM_EPOCHS,
        "--batch_size=%d" % PER_TOWER_BATCH,
        "--learning_rate=%g" % LEARNING_RATE,
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % train_dir,
        "--tb_logging",
    )
    return train_dir, result.stdout


def accuracy_lines(stdout):
    return re.findall(r": (test accuracy = .*)", stdout)


@pytest.mark.slow
def test_two_towers_stop_after_the_epochs_at_the_floor_step(two_tower_run):
    train_dir, stdout = two_tower_run
    assert "Done training for 3 epochs, %d steps." % EXPECTED_STEPS in (
        stdout.splitlines()
    )
    checkpoint = tf.train.latest_checkpoint(str(train_dir))
    assert checkpoint.endswith("model.ckpt-%d" % EXPECTED_STEPS)
    assert tf.train.load_variable(checkpoint, "global_step") == EXPECTED_STEPS


@pytest.mark.slow
def test_a_run_prints_progress_at_least_every_tenth_of_its_steps(
    two_tower_run,
):
    _, stdout = two_tower_run
    steps = [int(step) for step in re.findall(r": step (\d+), loss", stdout)]
    # --log_frequency's default, 100 steps, printed 4 lines in 409 steps;
    # a tenth is 41 steps (and a step 30 s after the last line prints one).
    gaps = np.diff([0, *steps, EXPECTED_STEPS])
    assert (EXPECTED_STEPS, max(gaps) <= 41) == (409, True)


@pytest.mark.slow
def test_two_towers_learn_the_sample_set_far_above_chance(
    two_tower_run, mnist_data_dir
):
    train_dir, stdout = two_tower_run
    accuracy, num_examples, step = mnist_model.evaluate(
        str(train_dir), str(mnist_data_dir), 100
    )
    print("test accuracy after %d steps: %.4f" % (step, accuracy))
    assert accuracy > MIN_ACCURACY
    assert (num_examples, step) == (1000, EXPECTED_STEPS)
    # The trainer reports the same score of the same checkpoint.
    assert accuracy_lines(stdout) == [
        "test accuracy = %.4f (1000 examples, step %d)"
        % (accuracy, EXPECTED_STEPS)
    ]


# The default run (2 epochs of 50, 120 steps) scored 0.916 to 1.000 in the
# runs seen; on the sample set before it, 0.19 to 0.29, and 0.1 at times.
MIN_DEFAULT_ACCURACY = 0.5


@pytest.mark.slow
def test_the_default_run_learns_the_sample_set_above_chance(
    mnist_data_dir, tmp_path
):
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--fake_data",
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % tmp_path,
    )
    [line] = accuracy_lines(result.stdout)
    found = re.fullmatch(
        r"test accuracy = (\d\.\d{4}) \(1000 examples, step (\d+)\)", line
    )
    print(line)
    assert (int(found[2]), float(found[1]) > MIN_DEFAULT_ACCURACY) == (
        mnist_data.FAKE_SPLIT_SIZES["train"] * 2 // 50,
        True,
    )


@pytest.mark.slow
def test_tb_logging_writes_the_loss_summaries(two_tower_run):
    train_dir, _ = two_tower_run
    events = event_accumulator.EventAccumulator(
        str(train_dir), size_guidance={event_accumulator.SCALARS: 0}
    )
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "Loss/cross_entropy",
        "local3/weight_loss",
        "local4/weight_loss",
        "Loss/total_loss",
        "global_step/sec",
    }
    total_loss = events.Scalars("Loss/total_loss")
    # Written after the first step, then every 100 steps.
    assert [e.step for e in total_loss] == [1, 101, 201, 301, 401]
    assert total_loss[-1].value < total_loss[0].value - 1.0


@pytest.fixture(scope="module")
def eval_only_stdout(two_tower_run, mnist_data_dir, tmp_path_factory):
    """--eval_only on a copy of `two_tower_run` named as a pattern: stdout.

    The copy is named 'mnist[1]', beside a folder its pattern would match.
    """
    train_dir, _ = two_tower_run
    folder = tmp_path_factory.mktemp("eval_only")
    shutil.copytree(train_dir, folder / "mnist[1]")
    (folder / "mnist1").mkdir()
    return run_script(
        "mnist_multi_gpu_train.py",
        "--eval_only",
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % (folder / "mnist[1]"),
    ).stdout


@pytest.mark.slow
def test_eval_only_scores_the_newest_checkpoint_without_training(
    two_tower_run, eval_only_stdout
):
    _, stdout = two_tower_run
    assert accuracy_lines(eval_only_stdout) == accuracy_lines(stdout)
    assert "Done training" not in eval_only_stdout


@pytest.mark.slow
def test_a_train_dir_named_as_a_pattern_is_scored_from_its_own_files(
    two_tower_run, eval_only_stdout
):
    _, stdout = two_tower_run
    assert accuracy_lines(eval_only_stdout) == accuracy_lines(stdout)


@pytest.mark.slow
def test_a_restart_resumes_and_counts_only_its_own_steps(
    two_tower_run, mnist_data_dir, tmp_path
):
    train_dir, _ = two_tower_run
    shutil.copytree(train_dir, tmp_path, dirs_exist_ok=True)
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--num_gpus=2",
        "--cpu_towers",
        "--num_epochs=1",
        "--batch_size=150",
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % tmp_path,
    )
    # floor(3000 * 1 / 300) = 10 more steps.
    assert "Done training for 1 epochs, 10 steps." in result.stdout
    assert "training from step %d" % EXPECTED_STEPS in result.stdout
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith(
        "model.ckpt-%d" % (EXPECTED_STEPS + 10)
    )


@pytest.mark.slow
def test_without_tb_logging_no_summaries_are_written(mnist_data_dir, tmp_path):
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--num_gpus=2",
        "--cpu_towers",
        "--num_epochs=1",
        "--batch_size=100",
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % tmp_path,
    )
    # floor(3000 * 1 / 200) = 15 steps.
    assert "Done training for 1 epochs, 15 steps." in result.stdout
    events = event_accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    tags = events.Tags()
    assert tags["graph"]  # the checkpoint saver writes the graph, no more
    summary_kinds = {kind for kind, names in tags.items() if names}
    assert summary_kinds == {"graph", "meta_graph"}


@pytest.mark.slow
def test_more_towers_than_gpus_needs_cpu_towers(mnist_data_dir, tmp_path):
    visible = len(tf.config.list_physical_devices("GPU"))
    # One tower with no GPU runs on the CPU; two or more need --cpu_towers.
    asked = max(2, visible + 1)
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--num_gpus=%d" % asked,
        "--data_dir=%s" % mnist_data_dir,
        "--train_dir=%s" % tmp_path,
        expect_success=False,
    )
    assert result.stderr.splitlines()[-1] == (
        "mnist_multi_gpu_train.py: error: --num_gpus=%d but %d GPU(s) are "
        "visible; pass --cpu_towers to run the towers on virtual CPU devices"
        % (asked, visible)
    )


@pytest.mark.slow
def test_a_corrupt_training_file_stops_with_its_name(mnist_data_dir, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(mnist_data_dir, data_dir)
    filename = data_dir / "train.tfrecords"
    data = bytearray(filename.read_bytes())
    data[record_offset(data, 1000) + 500] ^= 0xFF  # in record 1000's image
    filename.write_bytes(bytes(data))
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--num_gpus=2",
        "--cpu_towers",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % (tmp_path / "train"),
        expect_success=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "mnist_multi_gpu_train.py: error: %s is corrupt: a record fails its "
        "checksum or is cut short; make it again with mnist_input.py" % filename
    )
    # It failed before its first step: the folder it made is gone.
    assert not (tmp_path / "train").exists()


def test_the_trainers_help_claims_the_accuracy_these_tests_require():
    description = ast.get_docstring(
        ast.parse((REPO / "mnist_multi_gpu_train.py").read_text())
    )
    claim = re.search(
        r"test accuracy on the sample set from\s+([\d.]+) to ([\d.]+) over "
        r"the runs seen \(chance 0\.1; the tests require more than\s+"
        r"([\d.]+)\)",
        description,
    )
    assert claim, description
    lowest, highest, required = map(float, claim.groups())
    assert required == MIN_ACCURACY < lowest <= highest <= 1.0


def test_the_mnist_help_states_its_constant_learning_rate():
    assert (
        "--learning_rate (default: 0.01; a non-negative number) Learning rate "
        "of the momentum optimizer, constant: it applies to the mean gradient "
        "of a step's batch_size * num_gpus examples, the same whatever "
        "--num_gpus."
    ) in help_words("mnist_multi_gpu_train.py")
