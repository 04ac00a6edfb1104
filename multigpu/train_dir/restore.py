"""Restoring a checkpoint: what it must hold, what may be initialised.

Checkpoints name variables without a tower scope, so one restores into any
trainer and tower count. A resume requires the weights and `global_step`
(a float32 one, of the tutorial's multi-GPU trainer, is cast) and
initialises what the checkpoint lacks; a warm start restores the model's
variables and their averages, the rest starts afresh.

Values are fed to the variables' own initialisers, so restoring adds no op
to the (finalised) graph.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from multigpu import errors
from multigpu.graph import any_model
from multigpu.train_dir import checkpoints

# The name ExponentialMovingAverage gives a variable's shadow: NAME/SUFFIX.
SHADOW_SUFFIX = "/ExponentialMovingAverage"
# The CIFAR-10 tutorial net's first and last weights, which name its
# checkpoints.
TUTORIAL_SHAPES = {
    "conv1/weights": [5, 5, 3, 64],
    "softmax_linear/weights": [192, 10],
}
# How many names an error or a note lists before 'and N more'.
NAMES_LISTED = 3


class Pretrained(NamedTuple):
    """--pretrained_model_checkpoint_path and --fine_tune: the checkpoint a
    first run warm starts from, and whether it keeps only the other layers.
    """

    path: str = ""
    fine_tune: bool = False


def resume(session, checkpoint):
    """Restores a train_dir's checkpoint into a new session's variables;
    ValueError when a weight or `global_step` is missing or misshapen."""
    required = set(_names(tf.compat.v1.trainable_variables()))
    required.add(checkpoints.saved_name(tf.compat.v1.train.get_global_step()))
    initialised = restore_variables(
        session, checkpoint, checkpoints.saved_variables(), required
    )
    _initialise(session, initialised)
    if initialised:
        print(
            "Resumed from %s; initialised %d variable(s) it does not hold "
            "(summary or optimizer state): %s"
            % (checkpoint, len(initialised), _listed(_names(initialised)))
        )


def warm_start(session, checkpoint, fine_tune=False):
    """Starts a new run from every variable of another run's model.

    The model's variables (weights, batch-norm statistics, frozen layers)
    are those whose moving averages the trainers keep; each is restored
    with its average when the checkpoint holds it, the weights required.
    fine_tune: initialise the layer that makes the logits afresh.
    """
    # The model's variables (not the towers' copies), in graph order.
    saved = tf.compat.v1.global_variables()
    model = [
        var
        for var in any_model.moving_average_variables()
        if any(var is each for each in saved)
    ]
    fresh = logits_layer(model) if fine_tune else []
    variables = {
        checkpoints.saved_name(var): var
        for var in model
        if all(var is not each for each in fresh)
    }
    shadows = {
        name: var
        for name, var in checkpoints.saved_variables().items()
        if name.endswith(SHADOW_SUFFIX)
        and name[: -len(SHADOW_SUFFIX)] in variables
    }
    restored = dict(variables, **shadows)
    required = set(_names(tf.compat.v1.trainable_variables())) & set(restored)
    absent = restore_variables(session, checkpoint, restored, required)
    _initialise(
        session,
        [
            var
            for var in tf.compat.v1.global_variables()
            if checkpoints.saved_name(var) not in restored
        ]
        + absent,
    )
    print(_warm_start_lines(checkpoint, variables, shadows, absent, fresh))


def _warm_start_lines(checkpoint, variables, shadows, absent, fresh):
    absent = set(_names(absent))
    trainable = set(_names(tf.compat.v1.trainable_variables()))
    kept = [name for name in variables if name not in absent]
    lines = [
        "Warm start from %s: restored %d model variable(s), %d of them not "
        "trainable (batch-norm statistics, frozen layers), and %d moving "
        "average(s); the step, the optimizer and the loss averages start "
        "afresh"
        % (
            checkpoint,
            len(kept),
            len(set(kept) - trainable),
            len(set(shadows) - absent),
        )
    ]
    left = []
    if fresh:
        left.append(
            "%s (--fine_tune: the layer that makes the logits)"
            % ", ".join(_names(fresh))
        )
    if absent:
        left.append("%s (not in the checkpoint)" % _listed(sorted(absent)))
    if left:
        lines.append(
            "Warm start left at their initial values: %s" % "; ".join(left)
        )
    return "\n".join(lines)


# The op types that pass a variable's value on to a layer: reads, copies
# between devices, the casts of reduced precision.
_READS = ("Identity", "ReadVariableOp", "Cast", "Enter")
# The op types that multiply a layer's input by its weights.
_PRODUCTS = (
    "MatMul",
    "BatchMatMul",
    "BatchMatMulV2",
    "Conv2D",
    "DepthwiseConv2dNative",
    "Einsum",
)
# The loss ops whose first input is the logits.
_LOSSES = (
    "SparseSoftmaxCrossEntropyWithLogits",
    "SoftmaxCrossEntropyWithLogits",
)


def logits_layer(model):
    """The variables of model that make the logits, in graph order.

    Walks back from the logits (the loss's first input) to the last matmul
    or convolution: its weights and what the walk met on the way (the bias)
    are the layer's.
    """
    by_name = {var.op.name: var for var in model}
    found = set()
    for op in tf.compat.v1.get_default_graph().get_operations():
        if op.type in _LOSSES:
            found |= _layer_variables(op.inputs[0].op, by_name)
    if not found:
        raise ValueError(
            "--fine_tune found no variable that makes the logits (a weight "
            "of the last matmul or convolution before the softmax loss); "
            "train without --fine_tune"
        )
    return [var for var in model if var.op.name in found]


def _layer_variables(logits_op, by_name):
    found, seen, stack = set(), set(), [(logits_op, False)]
    while stack:
        op, weights_only = stack.pop()
        if op.name in by_name:
            found.add(op.name)
        elif op.name not in seen and (not weights_only or op.type in _READS):
            seen.add(op.name)
            weights_only = weights_only or op.type in _PRODUCTS
            stack.extend((each.op, weights_only) for each in op.inputs)
    return found


def restore_variables(session, checkpoint, variables, required):
    """Loads the checkpoint's values of variables (dict, saved name ->
    variable); ValueError when one of required is missing or a shape
    differs. Returns the variables it does not hold, not initialised."""
    with checkpoints.reading(checkpoint) as reader:
        shapes = reader.get_variable_to_shape_map()
        _check_fits(checkpoint, shapes, variables, required)
        # The tutorial's multi-GPU trainer keeps a float32 global_step.
        values = {
            var: np.asarray(reader.get_tensor(name)).astype(
                var.dtype.base_dtype.as_numpy_dtype
            )
            for name, var in variables.items()
            if name in shapes
        }
    # The initialiser assigns its input: fed, it assigns the value instead,
    # with no new op in the (finalised) graph. One run for all: each run of
    # another set of ops builds an executor of its own (about 0.2 s).
    session.run(
        [var.initializer for var in values],
        {var.initializer.inputs[1]: value for var, value in values.items()},
    )
    return [var for name, var in variables.items() if name not in shapes]


class Restorer:
    """The eval's `Saver`: a checkpoint of another model is a ValueError
    naming the variables, not a NotFoundError's traceback."""

    def __init__(self, variables):
        self._variables = variables  # name in the checkpoint -> variable

    def restore(self, session, checkpoint):
        restore_variables(
            session, checkpoint, self._variables, set(self._variables)
        )


def restore_fn(checkpoint, pretrained_path, fine_tune):
    """The chief's restore: callable(session), or None to initialise only.

    checkpoint: the train_dir's newest valid checkpoint, or None.
    """
    if fine_tune and not pretrained_path:
        raise ValueError(
            "--fine_tune needs --pretrained_model_checkpoint_path, the "
            "checkpoint whose other layers it starts from"
        )
    if checkpoint is not None:
        if pretrained_path:
            print(
                "Resuming from %s: the train_dir has checkpoints, so "
                "--pretrained_model_checkpoint_path=%s is ignored"
                % (checkpoint, pretrained_path)
            )
        return lambda session: resume(session, checkpoint)
    if not pretrained_path:
        return None
    source = pretrained_checkpoint(pretrained_path)
    return lambda session: warm_start(session, source, fine_tune)


def pretrained_checkpoint(path):
    """path, a checkpoint's prefix, or the newest valid checkpoint of the
    folder path."""
    if tf.io.gfile.isdir(path):
        try:
            found = checkpoints.newest_valid_checkpoint(path)
        except errors.TrainingError:
            raise ValueError(
                "--pretrained_model_checkpoint_path=%s: none of the "
                "folder's checkpoints reads (see the warnings above); pass "
                "a folder or a checkpoint that reads in full" % path
            ) from None
        if found is None:
            raise ValueError(
                "--pretrained_model_checkpoint_path=%s: the folder holds no "
                "checkpoint" % path
            )
        return found
    if not tf.io.gfile.exists(path + ".index"):
        raise ValueError(
            "--pretrained_model_checkpoint_path=%s: no checkpoint there (%s "
            "is missing); pass a checkpoint's prefix, e.g. "
            "/tmp/cifar10_train/model.ckpt-1000, or its folder"
            % (path, path + ".index")
        )
    error = checkpoints.read_error(path)
    if error is not None:
        raise ValueError(
            "--pretrained_model_checkpoint_path=%s does not read in full "
            "(%s); pass a complete checkpoint" % (path, error)
        )
    return path


def model_name(shapes):
    """The --model ('tutorial', 'resnet20', ...) whose checkpoint holds
    these shapes (dict, name -> list of ints); None for another model."""
    # The ResNets' residual blocks: stage1/block1 ... stage1/blockN.
    blocks = [name for name in shapes if name.endswith("/conv2/kernel")]
    blocks = [name for name in blocks if name.startswith("stage1/block")]
    if blocks:
        return "resnet%d" % (6 * len(blocks) + 2)
    tutorial = all(shapes.get(n) == s for n, s in TUTORIAL_SHAPES.items())
    if tutorial and "local3/weights" in shapes:
        return "tutorial"
    return None


def describe(shapes):
    """What a checkpoint of these shapes seems to hold, e.g.
    '--model=resnet20 (3 blocks per stage)'."""
    name = model_name(shapes)
    if name is not None and name.startswith("resnet"):
        blocks = (int(name[len("resnet") :]) - 2) // 6
        return "--model=%s (%d blocks per stage)" % (name, blocks)
    if name is not None:
        return "the CIFAR-10 tutorial's net (--model=%s)" % name
    kernel = shapes.get("conv1/weights")
    logits = shapes.get("softmax_linear/weights")
    if kernel is None or logits is None or len(kernel) != 4:
        return "no model of this suite (%d variables, e.g. %s)" % (
            len(shapes),
            _listed(sorted(shapes)),
        )
    return (
        "a model of %d-channel images and %d classes (conv1/weights %s, "
        "softmax_linear/weights %s)" % (kernel[2], logits[-1], kernel, logits)
    )


def _check_fits(checkpoint, shapes, variables, required):
    missing = [
        "%s %s" % (name, variables[name].shape.as_list())
        for name in sorted(required)
        if name not in shapes
    ]
    mismatched = [
        "%s %s where this model has %s"
        % (name, shapes[name], variables[name].shape.as_list())
        for name in sorted(variables)
        if name in shapes and shapes[name] != variables[name].shape.as_list()
    ]
    if not missing and not mismatched:
        return
    found = []
    if mismatched:
        found.append("holds %s" % _listed(mismatched))
    if missing:
        found.append("lacks %s" % _listed(missing))
    raise ValueError(
        "checkpoint %s does not fit this model: it %s; it seems to hold %s"
        % (checkpoint, " and ".join(found), describe(shapes))
    )


def _initialise(session, variables):
    # The weights first: a moving average's shadow starts from their value.
    trainable = set(_names(tf.compat.v1.trainable_variables()))
    for is_weight in (True, False):
        group = [
            var.initializer
            for var in variables
            if (checkpoints.saved_name(var) in trainable) == is_weight
        ]
        if group:
            session.run(group)


def _names(variables):
    return sorted(checkpoints.saved_name(var) for var in variables)


def _listed(names):
    names = list(names)
    shown = ", ".join(names[:NAMES_LISTED])
    more = len(names) - NAMES_LISTED
    return shown + (" and %d more" % more if more > 0 else "")
