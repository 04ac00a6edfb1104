"""What --model names, and the recipe each model trains with.

A recipe is two functions: `learning_rate(global_step, examples_per_step)`
and `optimizer(learning_rate)`.
"""

import collections
import functools
import importlib
import os
import re
import sys

import tensorflow as tf

import cifar10
import cifar10_input
from cifar10_models import resnet
from multigpu.graph import any_model, summaries, variables
from multigpu.train_dir import checkpoints, restore, train_dirs

# A model (build: callable(images, is_training) -> logits) and its recipe.
Model = collections.namedtuple("Model", "name build learning_rate optimizer")

# The examples per step that a piecewise recipe's learning rate and steps
# are given for; both scale with the examples per step (He et al.'s 128).
REFERENCE_EXAMPLES_PER_STEP = resnet.EXAMPLES_PER_STEP
# The learning-rate factor at each boundary of a piecewise recipe.
PIECEWISE_DECAY_FACTOR = 0.1


def piecewise_learning_rate(
    global_step, examples_per_step, initial, boundaries
):
    """initial, divided by 10 at each boundary: float32 scalar, summarised
    as 'Loss/learning_rate'. initial and boundaries are given for 128
    examples per step and scaled linearly to examples_per_step."""
    scale = examples_per_step / REFERENCE_EXAMPLES_PER_STEP
    steps = [max(1, round(b / scale)) for b in boundaries]
    values = [
        initial * scale * PIECEWISE_DECAY_FACTOR**i
        for i in range(len(steps) + 1)
    ]
    if not steps:
        lr = tf.constant(values[0], tf.float32, name="learning_rate")
    else:
        # piecewise_constant changes after a boundary; the rate changes at it.
        lr = tf.compat.v1.train.piecewise_constant(
            global_step, [tf.cast(s - 1, tf.int64) for s in steps], values
        )
    summaries.scalar_summary(summaries.FIRST_GROUP + "learning_rate", lr)
    return lr


def momentum_optimizer(lr, momentum):
    if momentum == 0:
        return tf.compat.v1.train.GradientDescentOptimizer(lr)
    return tf.compat.v1.train.MomentumOptimizer(lr, momentum)


TUTORIAL = Model(
    "tutorial", cifar10.inference, cifar10.learning_rate, cifar10.optimizer
)


def _piecewise(chosen, initial, boundaries, momentum):
    return chosen._replace(
        learning_rate=functools.partial(
            piecewise_learning_rate, initial=initial, boundaries=boundaries
        ),
        optimizer=functools.partial(momentum_optimizer, momentum=momentum),
    )


def _resnet(name, build):
    return _piecewise(
        TUTORIAL._replace(name=name, build=build),
        resnet.INITIAL_LEARNING_RATE,
        resnet.DECAY_STEPS,
        resnet.MOMENTUM,
    )


MODELS = {
    "tutorial": TUTORIAL,
    "resnet20": _resnet("resnet20", resnet.resnet20),
    "resnet56": _resnet("resnet56", resnet.resnet56),
}


# Most --learning_rate_boundaries: each divides the rate by 10, and
# 10 ** -38 is about float32's smallest normal number (1.2e-38); a list of
# 760 built a nest of conds deeper than Python's recursion limit.
MAX_BOUNDARIES = 38


def model(name, learning_rate=0.0, boundaries=(), momentum=0.0):
    """The `Model` --model names (a key of MODELS or 'MODULE:FUNCTION'),
    with its recipe, or the flags' own when learning_rate > 0."""
    if len(boundaries) > MAX_BOUNDARIES:
        raise ValueError(
            "--learning_rate_boundaries lists %d steps; at most %d: each "
            "divides the learning rate by 10, and 38 take a rate of 1 below "
            "float32's smallest normal number"
            % (len(boundaries), MAX_BOUNDARIES)
        )
    chosen = MODELS.get(name) or user_model(name)
    if learning_rate <= 0:
        return chosen
    boundaries = tuple(int(step) for step in boundaries)
    return _piecewise(chosen, learning_rate, boundaries, momentum)


def logits(model, images, is_training, compute_dtype):
    """The model's logits (float32 [batch, 10]) of one tower's images
    (float32 [batch, 24, 24, 3]), computed in compute_dtype; its variables
    in the graph's model block ('model/conv1/weights')."""
    with tf.compat.v1.variable_scope(
        summaries.MODEL, auxiliary_name_scope=False
    ):
        return any_model.call_model(
            model.build,
            images,
            is_training,
            cifar10.NUM_CLASSES,
            compute_dtype,
            "--model=%s" % model.name,
        )


def default_train_dir(model_name):
    """The default --train_dir of a model: no two models share one, e.g.
    /tmp/cifar10_train_my_models_net for my_models:net."""
    if model_name == TUTORIAL.name:
        return cifar10_input.TRAIN_DIR
    return "%s_%s" % (
        cifar10_input.TRAIN_DIR,
        re.sub(r"[^A-Za-z0-9_-]+", "_", model_name),
    )


def refuse_other_model(model, folder, flag):
    """ValueError when folder (of --flag) holds checkpoints of another
    model, by its record or, in an older folder, by its newest
    checkpoint's variables."""
    held = train_dirs.recorded_model(folder) or _checkpoints_model(folder)
    if held is None or held == model.name:
        return
    name = model.name
    raise ValueError(
        "--%s=%s holds checkpoints of --model=%s, not --model=%s: pass "
        "--model=%s to use them, or another --%s (--model=%s's own "
        "default is %s)"
        % (flag, folder, held, name, held, flag, name, default_train_dir(name))
    )


def model_and_train_dir(
    name, learning_rate, boundaries, momentum, train_dir, check_train_dir
):
    """(Model, str): a trainer's model and the folder it trains in;
    check_train_dir False for a folder cleared first or not trained in."""
    chosen = model(name, learning_rate, boundaries, momentum)
    train_dir = train_dir or default_train_dir(chosen.name)
    if check_train_dir:
        refuse_other_model(chosen, train_dir, "train_dir")
    return chosen, train_dir


def _checkpoints_model(folder):
    checkpoint = checkpoints.latest_checkpoint(folder)
    if checkpoint is None:
        return None
    try:
        with checkpoints.reading(checkpoint) as reader:
            return restore.model_name(reader.get_variable_to_shape_map())
    except tf.errors.OpError:
        return None  # Damaged: the run itself says so.


def next_commands(model, train_dir, data_dir):
    """[eval command, tensorboard command], as a CIFAR-10 trainer's closing
    report prints them."""
    model_flag = "" if model.name == TUTORIAL.name else " --model=" + model.name
    eval_command = cifar10_input.EVAL_COMMAND.format(
        train_dir=train_dir, data_dir=data_dir
    )
    return [
        eval_command + model_flag,
        "tensorboard --logdir=%s" % train_dir,
    ]


def user_model(name):
    """Imports a user's 'MODULE:FUNCTION' (from the current folder first,
    then PYTHONPATH), with the tutorial's recipe. Whatever fails, in it or
    in the import, is one line naming it (ValueError)."""
    flag = "--model=%s" % name
    module_name, colon, function_name = name.partition(":")
    if not colon or not module_name or not function_name:
        raise ValueError(
            "%s: expected one of %s or MODULE:FUNCTION"
            % (flag, ", ".join(MODELS))
        )
    module = _import(module_name, function_name, flag)
    build = getattr(module, function_name, None)
    if not callable(build):
        raise ValueError(
            "%s: module %s (%s) has no function %r"
            % (flag, module_name, module.__file__, function_name)
        )
    return TUTORIAL._replace(name=name, build=_reported(build, flag))


def _import(module_name, function_name, flag):
    if (
        "/" in module_name
        or module_name.startswith(".")
        or (module_name.endswith(".py"))
    ):
        # A file path: the module name Python imports it by, in the error.
        path = os.path.normpath(module_name)
        if path.endswith(".py"):
            path = path[: -len(".py")]
        folder, name = os.path.split(path)
        if os.path.isabs(path):
            example = "--model=%s:%s with PYTHONPATH=%s" % (
                name,
                function_name,
                folder,
            )
        else:
            dotted = path.replace("/", ".").lstrip(".")
            example = "--model=%s:%s" % (dotted, function_name)
        raise ValueError(
            "%s: expected a module name, found a file path; name the module "
            "as Python imports it from the current folder or PYTHONPATH, "
            "e.g. %s" % (flag, example)
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise _import_failed(flag, module_name, e) from None
        raise ValueError(
            "%s: cannot import module %r from the current folder or "
            "PYTHONPATH (%s)" % (flag, module_name, e)
        ) from None
    except SyntaxError as e:
        raise ValueError(
            "%s: %s, line %s, has a syntax error (%s); fix the module"
            % (flag, e.filename, e.lineno, e.msg)
        ) from None
    except Exception as e:
        raise _import_failed(flag, module_name, e) from None


def _import_failed(flag, module_name, error):
    first_line = str(error).strip().split("\n")[0]
    return ValueError(
        "%s: importing module %s raised %s: %s; fix the module (python -c "
        "'import %s' shows where)"
        % (flag, module_name, type(error).__name__, first_line, module_name)
    )


def _reported(build, flag):

    @functools.wraps(build)
    def build_reported(images, is_training):
        try:
            with variables.checked_variables(flag):
                return build(images, is_training)
        except Exception as e:
            if isinstance(e, variables.ModelVariableError):
                raise
            if any_model.needs_keras_2(e) or any_model.is_batch_norm_bug(e):
                raise  # `any_model.call_model` says what to install or do.
            raise ValueError(
                "%s raised %s: %s"
                % (flag, type(e).__name__, str(e).strip().split("\n")[0])
            ) from None

    return build_reported
