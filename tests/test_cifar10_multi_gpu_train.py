"""cifar10_multi_gpu_train.py end to end, on two virtual CPU towers."""

import re

import pytest
import tensorflow as tf
from conftest import (
    UNSTARTED_WORKER_FLAGS,
    checkpoint_steps,
    help_words,
    run_script,
)
from tensorboard.backend.event_processing import event_accumulator

import cifar10

MAX_STEPS = 200
PER_TOWER_BATCH = 32


@pytest.fixture(scope="module")
def two_tower_run(cifar10_data_dir, tmp_path_factory):
    """Trains 2 towers for MAX_STEPS steps; returns (train_dir, stdout)."""
    train_dir = tmp_path_factory.mktemp("multi_gpu_train")
    result = run_script(
        "cifar10_multi_gpu_train.py",
        "--num_gpus=2",
        "--cpu_towers",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=%d" % PER_TOWER_BATCH,
        "--max_steps=%d" % MAX_STEPS,
        "--save_checkpoint_steps=100",
        "--log_frequency=20",
    )
    return train_dir, result.stdout


@pytest.mark.slow
def test_two_towers_checkpoint_every_n_steps_and_at_the_last(two_tower_run):
    train_dir, stdout = two_tower_run
    assert checkpoint_steps(train_dir) == [0, 100, 200]
    assert "No GPU used: 2 tower(s) on virtual CPU devices /cpu:0, /cpu:1" in (
        stdout
    )


@pytest.mark.slow
def test_two_towers_lower_the_loss(two_tower_run):
    train_dir, stdout = two_tower_run
    events = event_accumulator.EventAccumulator(
        str(train_dir), size_guidance={event_accumulator.SCALARS: 0}
    )
    events.Reload()
    raw = events.Scalars("Loss/total_loss (raw)")
    # The default for a run of 200 steps: every 10, so 21 points.
    assert [e.step for e in raw] == [*range(1, MAX_STEPS, 10), MAX_STEPS]
    # From about 4.6 (2.3 of cross-entropy plus the initial weight decay).
    assert raw[0].value > 4.0
    # The loss average's chart starts at the first loss (zero-debiased).
    averaged = events.Scalars("Loss/total_loss")[0]
    assert averaged.value == pytest.approx(raw[0].value, rel=1e-5)
    # The towers' mean loss at the last step (the summary at step 101 can
    # still sit on the plateau before the sample classes are learned).
    last_logged = float(re.findall(r"loss = ([\d.]+)", stdout)[-1])
    assert last_logged < raw[0].value - 0.5


@pytest.mark.slow
def test_logged_examples_per_sec_counts_both_towers(two_tower_run):
    _, stdout = two_tower_run
    lines = re.findall(
        r"step (\d+), loss = [\d.]+ \(([\d.]+) examples/sec; ([\d.]+) "
        r"sec/batch\)",
        stdout,
    )
    assert [int(step) for step, _, _ in lines] == list(range(20, 201, 20))
    for _, examples_per_sec, sec_per_batch in lines:
        rate, seconds = float(examples_per_sec), float(sec_per_batch)
        # rate * seconds is the examples of a step (both towers), up to the
        # rounding of the printed values (0.05 examples/s, 0.0005 s): on a
        # fast CPU a step takes a few hundredths of a second, where 0.0005 s
        # is over 1%.
        assert abs(rate * seconds - 2 * PER_TOWER_BATCH) <= (
            rate * 0.0005 + seconds * 0.05 + 1e-9
        ), (rate, seconds)


@pytest.mark.slow
def test_eval_scores_the_two_tower_checkpoint_far_above_chance(
    two_tower_run, cifar10_data_dir, tmp_path
):
    train_dir, _ = two_tower_run
    result = run_script(
        "cifar10_eval.py",
        "--run_once",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % tmp_path,
        "--num_examples=2000",
    )
    precision = float(re.search(r"precision @ 1 = ([\d.]+)", result.stdout)[1])
    # Chance is 0.1; the sample classes differ by colour layout, which
    # 200 steps of 64 examples learn well beyond half of the test set.
    assert precision > 0.5


def test_more_towers_than_gpus_without_cpu_towers_is_an_error(tmp_path):
    result = run_script(
        "cifar10_multi_gpu_train.py",
        "--num_gpus=2",
        "--fake_data",
        "--data_dir=%s" % tmp_path,
        expect_success=False,
    )
    assert result.stderr.strip().endswith(
        "cifar10_multi_gpu_train.py: error: --num_gpus=2 but 0 GPU(s) are "
        "visible; pass --cpu_towers to run the towers on virtual CPU devices"
    )
    assert not (tmp_path / "cifar-10-batches-bin").exists()


@pytest.mark.parametrize("flag", ["--num_gpus", "--batch_size"])
def test_a_count_below_one_is_a_flag_error(flag):
    result = run_script(
        "cifar10_multi_gpu_train.py", "%s=0" % flag, expect_success=False
    )
    assert "flag %s=0: 0 is not a positive integer" % flag in result.stderr


@pytest.mark.slow
def test_xla_variables_on_the_tower_and_staged_input_train_and_resume(
    cifar10_data_dir, tmp_path
):
    common = [
        "cifar10_multi_gpu_train.py",
        "--num_gpus=2",
        "--cpu_towers",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % tmp_path,
        "--batch_size=8",
        "--log_frequency=2",
    ]
    first = run_script(
        *common, "--max_steps=4", "--xla", "--variable_device=tower"
    )
    # The checkpoint holds no trace of the options: resume without them.
    second = run_script(*common, "--max_steps=6", "--noprefetch_to_device")
    assert checkpoint_steps(tmp_path) == [0, 4, 6]
    # --log_frequency=2, but a 4-step run prints every tenth of its steps.
    assert re.findall(r"step (\d+), loss", first.stdout) == ["1", "2", "3", "4"]
    assert "training from step 4" in second.stdout
    assert re.findall(r"step (\d+), loss", second.stdout) == ["5", "6"]


def test_variables_on_a_tower_are_refused_in_cluster_mode(tmp_path):
    result = run_script(
        "cifar10_multi_gpu_train.py",
        "--variable_device=gpu",
        *UNSTARTED_WORKER_FLAGS,
        "--data_dir=%s" % tmp_path,
        expect_success=False,
    )
    assert result.stderr.strip().endswith(
        "cifar10_multi_gpu_train.py: error: --variable_device=gpu does not "
        "apply in cluster mode: the variables live on the ps tasks; drop it"
    )


def test_the_help_states_the_learning_rate_per_global_batch():
    assert (
        "The learning rate follows the examples trained, not the steps. The "
        "tutorial's rate, 0.1 times 0.1 every 350 epochs, counts an epoch as "
        "50,000 examples of all towers: it decays every 350 * 50,000 / "
        "(batch_size * num_gpus) steps, rounded down (68,359 steps on 2 GPUs "
        "of 128, 136,718 on one). The tutorial's original multi-GPU script "
        "counted steps of one tower's batch instead: it decayed every 136,718 "
        "steps of 128 whatever --num_gpus, so on N GPUs every N * 350 epochs."
    ) in help_words("cifar10_multi_gpu_train.py")
    # The steps it names, as the schedule computes them.
    with tf.Graph().as_default():
        rates = [
            cifar10.learning_rate(tf.constant(step, tf.int64), examples)
            for step, examples in [
                (68358, 256),
                (68359, 256),
                (136717, 128),
                (136718, 128),
            ]
        ]
        with tf.compat.v1.Session() as sess:
            assert sess.run(rates) == pytest.approx([0.1, 0.01, 0.1, 0.01])
