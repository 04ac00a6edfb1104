"""Runs never mix: each model has its own folder, its eval writes beside it,
and a folder of another model's checkpoints is refused before any work."""

import os

import pytest
from conftest import error_line, folder_contents, read_events, run_script

from multigpu.train_dir import train_dirs

# A user's own model, as the README's "Your own model" writes it.
OWN_MODEL = """
import tensorflow as tf


def net(images, is_training):
    flat = tf.compat.v1.layers.flatten(images)
    return tf.compat.v1.layers.dense(flat, 10, name="logits")


def net_with_a_summaries_scope(images, is_training):
    logits = net(images, is_training)
    with tf.compat.v1.variable_scope("summaries"):
        scale = tf.compat.v1.get_variable("logits/kernel", [], trainable=True)
    return logits * scale
"""


def _train(script, tmp_path, *flags, expect_success=True):
    return run_script(
        script,
        "--fake_data",
        "--data_dir=%s" % (tmp_path / "data"),
        "--batch_size=4",
        "--max_steps=2",
        *flags,
        expect_success=expect_success,
        env={"TMPDIR": str(tmp_path), "PYTHONPATH": str(tmp_path)},
    )


@pytest.fixture(scope="module")
def tutorial_run(tmp_path_factory):
    """A train_dir of the tutorial net, 2 steps."""
    tmp_path = tmp_path_factory.mktemp("tutorial")
    (tmp_path / "my_models.py").write_text(OWN_MODEL)
    _train("cifar10_train.py", tmp_path, "--train_dir=%s" % (tmp_path / "t"))
    return tmp_path, tmp_path / "t"


def _resnet20_refusal(script, data_dir, tmp_path, *flags):
    """The error line of `script --model=resnet20 ...` with TMPDIR=tmp_path."""
    return error_line(
        script,
        "--data_dir=%s" % data_dir,
        "--model=resnet20",
        *flags,
        env={"TMPDIR": str(tmp_path)},
    )


def _own_model_refusal(tmp_path, train_dir, function, *flags):
    """The error line of cifar10_train.py --model=my_models:FUNCTION, with
    the sample set and my_models.py of tmp_path."""
    return error_line(
        "cifar10_train.py",
        "--fake_data",
        "--data_dir=%s" % (tmp_path / "data"),
        "--train_dir=%s" % train_dir,
        "--model=my_models:%s" % function,
        *flags,
        env={"TMPDIR": str(tmp_path), "PYTHONPATH": str(tmp_path)},
    )


@pytest.mark.slow
def test_the_own_model_command_after_a_tutorial_run_is_one_line_and_changes_nothing(  # noqa: E501
    tutorial_run,
):
    tmp_path, train_dir = tutorial_run
    before = folder_contents(train_dir)
    assert before[train_dirs.MODEL_RECORD] == b"tutorial\n"
    line = _own_model_refusal(tmp_path, train_dir, "net", "--max_steps=600")
    assert line == (
        "cifar10_train.py: error: --train_dir=%s holds checkpoints of "
        "--model=tutorial, not --model=my_models:net: pass --model=tutorial "
        "to use them, or another --train_dir (--model=my_models:net's own "
        "default is %s/cifar10_train_my_models_net)" % (train_dir, tmp_path)
    )
    assert folder_contents(train_dir) == before


@pytest.mark.slow
def test_a_model_whose_names_would_collide_in_the_checkpoints_is_refused(
    tutorial_run,
):
    tmp_path, _ = tutorial_run
    line = _own_model_refusal(
        tmp_path, tmp_path / "collide", "net_with_a_summaries_scope"
    )
    assert line == (
        "cifar10_train.py: error: the variables model/logits/kernel and "
        "model/summaries/logits/kernel would both be saved as logits/kernel "
        "(the checkpoints' names leave out the blocks model/, update/, "
        "summaries/), so one would be lost; rename one of them, e.g. by "
        "another variable scope"
    )
    assert not (tmp_path / "collide").exists()


@pytest.mark.slow
def test_a_train_dir_without_the_record_is_known_by_its_variables(
    tutorial_run, tmp_path
):
    _, tutorial_dir = tutorial_run
    train_dir = tmp_path / "old"
    train_dir.mkdir()
    for name, content in folder_contents(tutorial_dir).items():
        if name != train_dirs.MODEL_RECORD:
            (train_dir / name).write_bytes(content)
    before = folder_contents(train_dir)
    line = _resnet20_refusal(
        "cifar10_multi_gpu_train.py",
        tutorial_dir.parent / "data",
        tmp_path,
        "--cpu_towers",
        "--fake_data",
        "--train_dir=%s" % train_dir,
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --train_dir=%s holds checkpoints "
        "of --model=tutorial, not --model=resnet20: pass --model=tutorial to "
        "use them, or another --train_dir (--model=resnet20's own default is "
        "%s/cifar10_train_resnet20)" % (train_dir, tmp_path)
    )
    assert folder_contents(train_dir) == before


@pytest.mark.slow
def test_the_eval_of_another_models_folder_names_the_model_to_pass(
    tutorial_run,
):
    tmp_path, train_dir = tutorial_run
    line = _resnet20_refusal(
        "cifar10_eval.py",
        tmp_path / "data",
        tmp_path,
        "--run_once",
        "--checkpoint_dir=%s" % train_dir,
    )
    assert line == (
        "cifar10_eval.py: error: --checkpoint_dir=%s holds checkpoints of "
        "--model=tutorial, not --model=resnet20: pass --model=tutorial to use "
        "them, or another --checkpoint_dir (--model=resnet20's own default "
        "is %s/cifar10_train_resnet20)" % (train_dir, tmp_path)
    )


@pytest.mark.slow
def test_two_models_default_runs_land_apart_with_their_evals_beside_them(
    tmp_path,
):
    folders = {
        "tutorial": "cifar10_train",
        "resnet20": "cifar10_train_resnet20",
    }
    data_dir = tmp_path / "data"
    for model, folder in folders.items():
        trained = _train("cifar10_train.py", tmp_path, "--model=%s" % model)
        train_dir = tmp_path / folder
        assert trained.stdout.strip().split("\n")[-2:] == [
            "  python cifar10_eval.py --run_once --checkpoint_dir=%s "
            "--data_dir=%s%s"
            % (
                train_dir,
                data_dir,
                "" if model == "tutorial" else " --model=" + model,
            ),
            "  tensorboard --logdir=%s" % train_dir,
        ]
        # The eval's defaults: the model's folder, and eval in it.
        run_script(
            "cifar10_eval.py",
            "--run_once",
            "--data_dir=%s" % data_dir,
            "--model=%s" % model,
            "--num_examples=8",
            "--batch_size=4",
            env={"TMPDIR": str(tmp_path)},
        )
    for model, folder in folders.items():
        train_dir = tmp_path / folder
        assert (train_dir / train_dirs.MODEL_RECORD).read_text() == model + "\n"
        scores = read_events(train_dir / "eval").Scalars("Precision @ 1")
        assert [each.step for each in scores] == [2]
    assert sorted(os.listdir(tmp_path)) == sorted(["data", *folders.values()])
