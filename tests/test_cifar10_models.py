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
from multigpu.train_dir import restore

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
        "--fake_data",
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
    events = read_events(train_dir / "eval")
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


# Models whose variables the towers cannot train, each named in one line.
BAD_VARIABLE_MODELS = textwrap.dedent(
    """
    import tensorflow as tf


    def _logits(images, name="w"):
        flat = tf.reshape(images, [images.shape[0], -1])
        w = tf.compat.v1.get_variable(name, [flat.shape[1], 10], flat.dtype)
        return tf.matmul(flat, w)


    def int_counter(images, is_training):
        tf.compat.v1.get_variable("counter", [], tf.int32)
        return _logits(images)


    def no_variables(images, is_training):
        return tf.tile(tf.reduce_mean(images, [1, 2]), [1, 4])[:, :10]


    def partitioned(images, is_training):
        with tf.compat.v1.variable_scope(
            "fc", partitioner=tf.compat.v1.fixed_size_partitioner(2)
        ):
            return _logits(images)


    def own_global_step(images, is_training):
        tf.compat.v1.get_variable("global_step", [], tf.float32)
        return _logits(images)


    def own_slot(images, is_training):
        tf.compat.v1.get_variable("w/Momentum", [24 * 24 * 3, 10])
        return _logits(images)


    def copy_named(images, is_training):
        return _logits(images, "towers/replica_1/w")


    def local_variable(images, is_training):
        tf.compat.v1.get_local_variable("seen", [], tf.float32)
        return _logits(images)
    """
)


@pytest.fixture
def bad_models(user_models):
    path = user_models.parent / "bad_models.py"
    path.write_text(BAD_VARIABLE_MODELS)
    yield path
    sys.modules.pop("bad_models", None)


@pytest.mark.parametrize(
    "function, message",
    [
        (
            "int_counter",
            "variable counter is int32, and the towers keep float variables "
            "only (the optimizer trains them, the moving averages average "
            "the others too); make it float32",
        ),
        (
            "partitioned",
            "variable fc/w is partitioned: partitioned variables are not "
            "supported; create it whole (no partitioner in get_variable or "
            "its variable_scope)",
        ),
        (
            "own_global_step",
            "variable global_step has a name the suite gives its own "
            "variables (global_step, loss_scale, loss_scale_good_steps, or "
            "a name ending in /Momentum or /ExponentialMovingAverage); "
            "rename it",
        ),
        (
            "own_slot",
            "variable w/Momentum has a name the suite gives its own "
            "variables (global_step, loss_scale, loss_scale_good_steps, or "
            "a name ending in /Momentum or /ExponentialMovingAverage); "
            "rename it",
        ),
        (
            "copy_named",
            "variable towers/replica_1/w is named like the copy "
            "towers/replica_N/... that "
            "--variable_update=replicated makes of each variable; rename its "
            "scope",
        ),
        (
            "local_variable",
            "variable seen is a local variable, which is left out of "
            "checkpoints and which the towers do not copy; make it a global "
            "variable (trainable=False if it is not trained)",
        ),
    ],
)
def test_a_variable_the_towers_cannot_train_is_named_in_one_line(
    bad_models, function, message
):
    model = registry.model("bad_models:" + function)
    with tf.Graph().as_default(), pytest.raises(ValueError) as error:
        any_model.call_model(model.build, tf.zeros([4, 24, 24, 3]), True, 10)
    assert str(error.value) == "--model=bad_models:%s: %s" % (function, message)


def test_a_model_without_variables_is_named_in_one_line(bad_models):
    model = registry.model("bad_models:no_variables")
    with tf.Graph().as_default(), pytest.raises(ValueError) as error:
        any_model.call_model(model.build, tf.zeros([4, 24, 24, 3]), True, 10)
    assert str(error.value) == (
        "--model=bad_models:no_variables creates no variable, so there is "
        "nothing to train; give it a layer with weights "
        "(tf.compat.v1.layers, or tf.compat.v1.get_variable)"
    )


@pytest.mark.parametrize(
    "source, name, message",
    [
        (
            'raise RuntimeError("no GPU config found")\n',
            "raising:net",
            "--model=raising:net: importing module raising raised "
            "RuntimeError: no GPU config found; fix the module (python -c "
            "'import raising' shows where)",
        ),
        (
            "import no_such_package\n",
            "needs_more:net",
            "--model=needs_more:net: importing module needs_more raised "
            "ModuleNotFoundError: No module named 'no_such_package'; fix the "
            "module (python -c 'import needs_more' shows where)",
        ),
        (
            "def net(images, is_training)\n    return images\n",
            "broken:net",
            "--model=broken:net: %(path)s, line 1, has a syntax error "
            "(expected ':'); fix the module",
        ),
        (
            "",
            "cifar10_models/registry.py:net",
            "--model=cifar10_models/registry.py:net: expected a module name, "
            "found a file path; name the module as Python imports it from "
            "the current folder or PYTHONPATH, e.g. "
            "--model=cifar10_models.registry:net",
        ),
        (
            "",
            "./my_models.py:small_net",
            "--model=./my_models.py:small_net: expected a module name, found "
            "a file path; name the module as Python imports it from the "
            "current folder or PYTHONPATH, e.g. --model=my_models:small_net",
        ),
        (
            "",
            "/srv/nets/my_models.py:small_net",
            "--model=/srv/nets/my_models.py:small_net: expected a module "
            "name, found a file path; name the module as Python imports it "
            "from the current folder or PYTHONPATH, e.g. "
            "--model=my_models:small_net with PYTHONPATH=/srv/nets",
        ),
    ],
    ids=["raises", "imports_missing", "syntax_error", "path", "dot", "abs"],
)
def test_a_module_that_fails_to_import_is_one_line_naming_it(
    user_models, source, name, message
):
    module = name.partition(":")[0]
    path = user_models.parent / (module + ".py")
    if source:
        path.write_text(source)
    try:
        with pytest.raises(ValueError) as error:
            registry.model(name)
    finally:
        sys.modules.pop(module, None)
    assert str(error.value) == message % {"path": path}


@pytest.mark.slow
def test_a_trainer_given_a_model_with_an_int32_variable_exits_1_naming_it(
    bad_models, cifar10_data_dir, tmp_path
):
    refused = error_line(
        "cifar10_multi_gpu_train.py",
        "--model=bad_models:int_counter",
        "--num_gpus=2",
        "--cpu_towers",
        "--variable_update=replicated",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % (tmp_path / "train"),
        env={"PYTHONPATH": str(bad_models.parent)},
    )
    assert refused == (
        "cifar10_multi_gpu_train.py: error: --model=bad_models:int_counter: "
        "variable counter is int32, and the towers keep float variables "
        "only (the optimizer trains them, the moving averages average the "
        "others too); make it float32"
    )


def test_a_tutorial_checkpoint_read_as_a_resnet_is_named_as_the_tutorial():
    with tf.Graph().as_default():
        cifar10.inference(tf.zeros([1, 24, 24, 3]))
        shapes = {
            v.op.name: v.shape.as_list()
            for v in tf.compat.v1.global_variables()
        }
    assert restore.describe(shapes) == (
        "the CIFAR-10 tutorial's net (--model=tutorial)"
    )


def test_more_than_38_learning_rate_boundaries_are_one_line():
    # 760 and more built conds nested past Python's recursion limit.
    with pytest.raises(ValueError) as raised:
        registry.model("resnet20", 0.1, [str(step) for step in range(1, 761)])

    assert str(raised.value) == (
        "--learning_rate_boundaries lists 760 steps; at most 38: each divides "
        "the learning rate by 10, and 38 take a rate of 1 below float32's "
        "smallest normal number"
    )
