"""--model: the ResNets, their recipe, and a user's MODULE:FUNCTION."""

import pathlib
import re
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    error_line,
    eval_scores_in_numpy,
    read_events,
    run_script,
)

import cifar10
from cifar10_models import registry, resnet
from multigpu.graph import any_model
from multigpu.run import restore

REPO = pathlib.Path(__file__).resolve().parent.parent
# A user's model file: docs/models.md's (its "Your own model" section), and
# one that fails inside.
DOCS_MODEL = (
    (REPO / "docs" / "models.md")
    .read_text()
    .split("```python\n")[1]
    .split("```")[0]
)
USER_MODEL = DOCS_MODEL + textwrap.dedent(
    """

    def broken_net(images, is_training):
        raise KeyError("no layer called conv9")
    """
)


@pytest.fixture
def user_models(tmp_path, monkeypatch):
    """my_models.py in the current folder; forgotten by Python afterwards."""
    path = tmp_path / "my_models.py"
    path.write_text(USER_MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield path
    sys.modules.pop("my_models", None)


def resnet_parameters(blocks_per_stage):
    """The trainable parameters of the paper's net, counted layer by layer."""
    count = 3 * 3 * 3 * 16 + 2 * 16  # conv1 (no bias), its batch norm
    in_filters = 16
    for filters in (16, 32, 64):
        for _ in range(blocks_per_stage):
            count += 3 * 3 * in_filters * filters + 2 * filters
            count += 3 * 3 * filters * filters + 2 * filters
            in_filters = filters
    return count + 64 * 10 + 10  # fc; option A shortcuts add nothing


@pytest.mark.parametrize(
    "build, blocks, millions",
    [(resnet.resnet20, 3, 0.27), (resnet.resnet56, 9, 0.85)],
)
def test_the_resnets_have_the_papers_parameter_counts(build, blocks, millions):
    with tf.Graph().as_default():
        logits = any_model.call_model(build, tf.zeros([2, 24, 24, 3]), True, 10)
        variables = tf.compat.v1.trainable_variables()
        counted = sum(v.shape.num_elements() for v in variables)
        updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    assert logits.shape.as_list() == [2, 10]
    assert counted == resnet_parameters(blocks)
    assert round(counted / 1e6, 2) == millions
    # Two moving statistics per batch norm, 6n + 1 batch norms.
    assert len(updates) == 2 * (6 * blocks + 1)


def learning_rates(model, examples_per_step, steps):
    with tf.Graph().as_default():
        global_step = tf.compat.v1.placeholder(tf.int64, [])
        lr = model.learning_rate(global_step, examples_per_step)
        with tf.compat.v1.Session() as sess:
            return [sess.run(lr, {global_step: step}).item() for step in steps]


def test_the_resnet_recipe_scales_rate_and_steps_with_the_examples_per_step():
    model = registry.model("resnet20")
    # 256 examples per step: twice the rate, boundaries at half the steps.
    rates = learning_rates(model, 256, [0, 15999, 16000, 23999, 24000])
    np.testing.assert_allclose(rates, [0.2, 0.2, 0.02, 0.02, 0.002], 1e-6)
    rates = learning_rates(model, 128, [31999, 32000, 48000])
    np.testing.assert_allclose(rates, [0.1, 0.01, 0.001], rtol=1e-6)
    with tf.Graph().as_default():
        optimizer = model.optimizer(0.1)
    assert isinstance(optimizer, tf.compat.v1.train.MomentumOptimizer)
    assert optimizer._momentum == resnet.MOMENTUM == 0.9


def test_a_user_model_loads_from_the_current_folder_with_the_tutorials_recipe(
    user_models,
):
    model = registry.model("my_models:small_net")
    assert model.name == "my_models:small_net"
    assert model.learning_rate is cifar10.learning_rate
    assert model.optimizer is cifar10.optimizer
    with tf.Graph().as_default():
        logits = any_model.call_model(
            model.build, tf.zeros([4, 24, 24, 3]), False, 10
        )
    assert logits.shape.as_list() == [4, 10]
    own = registry.model("my_models:small_net", 0.05, ["100", "200"], 0.8)
    rates = learning_rates(own, 64, [0, 199, 200, 400])
    np.testing.assert_allclose(rates, [0.025, 0.025, 0.0025, 0.00025], 1e-6)
    with tf.Graph().as_default():
        assert own.optimizer(0.1)._momentum == 0.8


def test_a_learning_rate_without_boundaries_is_constant_and_scaled():
    own = registry.model("resnet20", 0.1)
    rates = learning_rates(own, 256, [0, 1, 32000, 10**6])
    np.testing.assert_allclose(rates, [0.2] * 4, rtol=1e-6)
    with tf.Graph().as_default():
        assert isinstance(
            own.optimizer(0.1), tf.compat.v1.train.GradientDescentOptimizer
        )


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "resnet21",
            "--model=resnet21: expected one of tutorial, resnet20, resnet56 "
            "or MODULE:FUNCTION",
        ),
        (
            "no_such_module:net",
            "--model=no_such_module:net: cannot import module "
            "'no_such_module' from the current folder or PYTHONPATH (No "
            "module named 'no_such_module')",
        ),
        (
            "my_models:no_such_net",
            "--model=my_models:no_such_net: module my_models (%s) has no "
            "function 'no_such_net'",
        ),
    ],
)
def test_a_bad_model_name_is_one_line_naming_it(name, message, user_models):
    with pytest.raises(ValueError) as error:
        registry.model(name)
    if "%s" in message:
        message %= user_models
    assert str(error.value) == message


def test_an_exception_inside_a_user_model_is_one_line_naming_it(user_models):
    model = registry.model("my_models:broken_net")
    with tf.Graph().as_default(), pytest.raises(ValueError) as error:
        any_model.call_model(model.build, tf.zeros([4, 24, 24, 3]), True, 10)
    assert str(error.value) == (
        "--model=my_models:broken_net raised KeyError: 'no layer called conv9'"
    )


@pytest.mark.slow
def test_a_resnet_checkpoint_moves_between_trainers_and_the_eval_scores_it(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    common = [
        "--model=resnet20",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=4",
    ]
    run_script(
        "cifar10_multi_gpu_train.py",
        *common,
        "--num_gpus=2",
        "--cpu_towers",
        "--max_steps=2",
    )
    # The one-device trainer resumes the two towers' checkpoint.
    result = run_script("cifar10_train.py", *common, "--max_steps=3")
    assert "training from step 2" in result.stdout
    assert "deprecated" not in result.stdout + result.stderr
    reader = tf.train.load_checkpoint(str(train_dir / "model.ckpt-3"))
    shapes = reader.get_variable_to_shape_map()
    assert shapes["stage3/block3/conv2/kernel"] == [3, 3, 64, 64]
    assert "stage1/block1/bn1/moving_mean/ExponentialMovingAverage" in shapes
    assert not [name for name in shapes if "tower" in name]
    # The eval as the trainer's closing report prints it, --model included.
    printed = result.stdout.splitlines()[-2].split()
    assert printed == [
        "python",
        "cifar10_eval.py",
        "--run_once",
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--data_dir=%s" % cifar10_data_dir,
        "--model=resnet20",
    ]
    result = run_script(
        "cifar10_eval.py", *printed[2:], "--num_examples=20", "--batch_size=10"
    )
    expected = eval_scores_in_numpy(
        str(train_dir / "model.ckpt-3"), cifar10_data_dir, "resnet20", 20, 10
    )
    printed_scores = [
        result.stdout.split(name + " = ")[1].split()[0]
        for name in ("precision @ 1", "recall @ 5")
    ]
    assert printed_scores == ["%.3f" % score for score in expected]
    events = read_events(tmp_path / "eval")
    written = [
        [(e.step, e.value) for e in events.Scalars(tag)]
        for tag in ("Precision @ 1", "Recall @ 5")
    ]
    assert written == [[(3, np.float32(score))] for score in expected]


def test_a_resnet_checkpoint_is_named_by_its_depth_in_a_misfit_error():
    with tf.Graph().as_default():
        any_model.call_model(
            resnet.resnet20, tf.zeros([1, 24, 24, 3]), True, 10
        )
        shapes = {
            v.op.name: v.shape.as_list()
            for v in tf.compat.v1.global_variables()
        }
    assert restore.describe(shapes) == "--model=resnet20 (3 blocks per stage)"


@pytest.mark.slow
def test_a_user_models_dry_run_on_8_gpus_plans_its_variables_on_the_cpu(
    tmp_path,
):
    (tmp_path / "my_models.py").write_text(USER_MODEL)
    result = run_script(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--num_gpus=8",
        "--model=my_models:small_net",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert "model: my_models:small_net" in result.stdout
    # conv1 3x3x3x32 + 32, bn1 2 x 32, logits 32x10 + 10: all on the CPU.
    assert re.search(
        r"/device:CPU:0 +[\d,]+ ops +1,290 parameters\n", result.stdout
    )
    towers = re.findall(
        r"/device:GPU:\d +[\d,]+ ops +0 parameters\n", result.stdout
    )
    assert len(towers) == 8


@pytest.mark.slow
def test_without_keras_2_a_tf1_layers_model_says_what_to_install(tmp_path):
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--model=resnet20",
        env={"TF_USE_LEGACY_KERAS": "0"},
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --model=resnet20 calls "
        "tf.compat.v1.layers, which needs Keras 2 on TensorFlow 2.16+: pip "
        'install ".[layers]" (tf-keras~=2.21.0)'
    )
