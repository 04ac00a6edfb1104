"""Calling any model `(images, is_training) -> logits` the way the towers do:
in the compute dtype, its variables float32 (tf_cnn_benchmarks' custom
getter), its logits checked, and refusing variables made outside
`tf.compat.v1.get_variable` (Keras 2 layer objects, `tf.Variable`), whose
batch-norm updates and regularizers never reach the TF1 collections and
which the towers could not share.
"""

import contextlib
import importlib
import logging
import sys
import warnings

import tensorflow as tf

from multigpu.graph import summaries, towers

# The dtypes the layers may compute in while the variables stay float32.
REDUCED_DTYPES = (tf.float16, tf.bfloat16)

# What to install for `tf.compat.v1.layers` on TensorFlow 2.16+ (Keras 2).
LAYERS_EXTRA = 'pip install ".[layers]" (tf-keras~=2.21.0)'

# `tensorflow.python.layers.normalization` (tf-slim's batch_norm) loads
# Keras 2's TF1 batch norm from this module, which tf-keras ships at
# SHIPPED_BATCH_NORM_MODULE: an upstream bug (TensorFlow 2.21, tf-keras
# 2.21), which `_supply_batch_norm_module` mends where tf-keras is installed.
MISSING_BATCH_NORM_MODULE = "tf_keras.legacy_tf_layers"
SHIPPED_BATCH_NORM_MODULE = "tf_keras.src.legacy_tf_layers"
BATCH_NORM_BUG = (
    "%s calls TensorFlow's TF1 batch norm (tf-slim's batch_norm is built "
    "on it), which needs tf-keras: " + LAYERS_EXTRA
)


def call_model(
    model_fn,
    images,
    is_training,
    num_classes,
    compute_dtype=tf.float32,
    name="the model",
):
    """float32 [batch, num_classes] logits of model_fn on one tower's
    images (float32 [batch, height, width, depth]), computed in compute_dtype.

    Variables asked for in float16 or bfloat16 are float32, handed to the
    layers as a cast, so checkpoints hold float32 only; weight decay applies
    to the float32 variable (`layers_regularize_float32`: a TF1 layer would
    regularize the cast, whose square sum bfloat16 rounds to 8 bits). The
    batch-norm statistics join MOVING_AVERAGE_VARIABLES, so the eval restores
    their averages too. name: the model as the user names it, for the errors.
    """
    _supply_batch_norm_module()
    with (
        _float32_variables() as (created, got, float32_of),
        (
            layers_regularize_float32(float32_of)
            if compute_dtype in REDUCED_DTYPES
            else contextlib.nullcontext()
        ),
        _quiet_tf1_layers(),
    ):
        first_op = len(tf.compat.v1.get_default_graph().get_operations())
        try:
            logits = model_fn(tf.cast(images, compute_dtype), is_training)
        except (AttributeError, ImportError) as e:
            _refuse_missing_layers(e, name)
            raise
    _refuse_other_variables(created, got, name)
    for var in created:
        # The towers' copies (local variables) are not the model's own.
        if not var.trainable and not towers.primary_name(var.op.name):
            tf.compat.v1.add_to_collection(
                tf.compat.v1.GraphKeys.MOVING_AVERAGE_VARIABLES, var
            )
    _check_logits(logits, [images.shape[0], num_classes], name)
    _refuse_float32_layers(first_op, compute_dtype, name)
    return tf.cast(logits, tf.float32)


def _refuse_missing_layers(error, name):
    if needs_keras_2(error):
        raise ValueError(
            "%s calls tf.compat.v1.layers, which needs Keras 2 on "
            "TensorFlow 2.16+: %s" % (name, LAYERS_EXTRA)
        ) from None
    if is_batch_norm_bug(error):
        raise ValueError(BATCH_NORM_BUG % name) from None


def _supply_batch_norm_module():
    """Where tf-keras is installed, its TF1 layers and their batch norm
    also under MISSING_BATCH_NORM_MODULE, the path TensorFlow loads them
    from (an alias in sys.modules, once); nothing where it is not."""
    if MISSING_BATCH_NORM_MODULE in sys.modules:
        return
    try:
        shipped = [
            importlib.import_module(SHIPPED_BATCH_NORM_MODULE + suffix)
            for suffix in ("", ".normalization")
        ]
    except ImportError:
        return
    for module, suffix in zip(shipped, ("", ".normalization")):
        sys.modules[MISSING_BATCH_NORM_MODULE + suffix] = module


@contextlib.contextmanager
def _float32_variables():
    """Yields (the variables created, the op names get_variable returned,
    each cast's `ref()` -> its float32 variable)."""
    created, got, float32_of = [], set(), {}

    def record_creation(next_creator, **kwargs):
        var = next_creator(**kwargs)
        created.append(var)
        return var

    def float32_storage(getter, *args, **kwargs):
        kwargs = by_name(args, kwargs)
        dtype = kwargs.get("dtype", tf.float32)
        reduced = dtype in REDUCED_DTYPES
        kwargs["dtype"] = tf.float32 if reduced else dtype
        var = getter(**kwargs)
        got.add(var.op.name)
        if not reduced:
            return var
        cast = tf.cast(var, dtype)
        float32_of[cast.ref()] = var
        return cast

    with (
        tf.variable_creator_scope(record_creation),
        tf.compat.v1.variable_scope(
            tf.compat.v1.get_variable_scope(),
            custom_getter=float32_storage,
            auxiliary_name_scope=False,
        ),
    ):
        yield created, got, float32_of


class _KerasDeprecations(logging.Filter):
    def filter(self, record):
        message = record.getMessage()
        return not ("tf_keras" in message and "deprecated" in message)


@contextlib.contextmanager
def _quiet_tf1_layers():
    """Hides tf-keras' notices that the TF1 layers, and their `apply`,
    are deprecated."""
    quiet = _KerasDeprecations()
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", r"`tf\.layers\.\w+` is deprecated", UserWarning
        )
        # tf-slim's layers call the TF1 layers' `apply`.
        warnings.filterwarnings(
            "ignore", r"`layer\.apply` is deprecated", UserWarning
        )
        tf.get_logger().addFilter(quiet)
        try:
            yield
        finally:
            tf.get_logger().removeFilter(quiet)


def needs_keras_2(error):
    """Whether an exception is tf.compat.v1.layers' missing Keras 2:
    AttributeError "`conv2d` is not available with Keras 3." or ImportError
    "Keras cannot be imported. Check that it is installed."
    """
    return isinstance(error, (AttributeError, ImportError)) and (
        "Keras" in str(error)
    )


def is_batch_norm_bug(error):
    return getattr(error, "name", None) == MISSING_BATCH_NORM_MODULE


def _refuse_other_variables(created, got, name):
    # A tower's copy is returned instead of the variable it copies.
    made = got | {towers.primary_name(each) for each in got}
    others = [
        summaries.without_blocks(var.op.name)
        for var in created
        if var.op.name not in made
    ]
    if others:
        raise ValueError(
            "%s creates variables without tf.compat.v1.get_variable (%s): "
            "Keras layer objects or tf.Variable, which the towers cannot "
            "share, and whose batch-norm updates and regularizers they "
            "cannot see; write its layers with the tf.compat.v1.layers "
            "functions (tf.compat.v1.layers.conv2d, ...) instead"
            % (name, ", ".join(others))
        )


def _refuse_float32_layers(first_op, compute_dtype, name):
    """A model given reduced-precision images whose matmuls and
    convolutions (the graph's ops from first_op on) all compute in float32
    (after a resize, say, that returns float32 and no cast back): refused,
    not trained as float32 under the name of the reduced dtype."""
    if compute_dtype not in REDUCED_DTYPES:
        return
    ops = tf.compat.v1.get_default_graph().get_operations()[first_op:]
    computing = [op for op in ops if op.type in _COMPUTING_OPS]
    if computing and all(op.outputs[0].dtype == tf.float32 for op in computing):
        raise ValueError(
            "%s computes in float32 under --use_fp16: given %s images, its "
            "%d matmul and convolution op(s) are all float32; cast back to "
            "the images' dtype after any op that returns float32 "
            "(tf.image.resize does), or train without --use_fp16"
            % (name, compute_dtype.name, len(computing))
        )


# The ops that do a model's arithmetic, whose dtype is the computation's.
_COMPUTING_OPS = (
    "MatMul",
    "BatchMatMulV2",
    "BatchMatMulV3",
    "Conv2D",
    "Conv3D",
    "DepthwiseConv2dNative",
)


def _check_logits(logits, shape, name):
    if (
        not isinstance(logits, tf.Tensor)
        or not logits.dtype.is_floating
        or logits.shape.as_list() != shape
    ):
        raise ValueError(
            "%s must return float logits of shape %s, returned %s"
            % (name, shape, _describe(logits))
        )


def _describe(value):
    if isinstance(value, tf.Tensor):
        return "%s %s" % (value.dtype.name, value.shape.as_list())
    return type(value).__name__


def moving_average_variables():
    """The trainable variables and the batch-norm statistics, once
    each, in graph order."""
    averaged = tf.compat.v1.trainable_variables()
    for var in tf.compat.v1.moving_average_variables():
        if all(var is not each for each in averaged):
            averaged.append(var)
    return averaged


# TF1's `get_variable` parameters, in its order.
PARAMETERS = tuple(
    "name shape dtype initializer regularizer reuse trainable collections "
    "caching_device partitioner validate_shape use_resource constraint "
    "synchronization aggregation".split()
)


def by_name(args, kwargs):
    """A getter's arguments, every one by its name: a model's own getter
    may pass them on by position, as TF1 allows (TensorFlow's official ResNet
    does)."""
    if len(args) > len(PARAMETERS):
        raise TypeError(
            "a variable getter takes at most %d arguments by position "
            "(%s), got %d" % (len(PARAMETERS), ", ".join(PARAMETERS), len(args))
        )
    named = dict(zip(PARAMETERS, args))
    twice = sorted(named.keys() & kwargs.keys())
    if twice:
        raise TypeError(
            "a variable getter got %s by position and by name"
            % ", ".join(twice)
        )
    named.update(kwargs)
    return named


# The base classes of the TF1 layers: tf-keras' (`tf.compat.v1.layers` on
# TensorFlow 2.16+) and TensorFlow's own copy (`tensorflow.python.layers`,
# which tf-slim builds on).
_TF1_LAYER_MODULES = (
    "tf_keras.src.legacy_tf_layers.base",
    "tensorflow.python.keras.legacy_tf_layers.base",
)
# The Keras 2 method that applies a layer's regularizer to its new weight.
_HOOK = "_handle_weight_regularization"


@contextlib.contextmanager
def layers_regularize_float32(float32_of):
    """TF1 layers built in this scope regularize the float32
    variable of a 16-bit cast in float32_of (filled while the scope is open).
    """
    patched = []
    for layer_class in _tf1_layer_classes():
        own = layer_class.__dict__.get(_HOOK)
        inherited = getattr(layer_class, _HOOK)

        def regularize(layer, name, weight, regularizer, inherited=inherited):
            if hasattr(weight, "ref"):
                weight = float32_of.get(weight.ref(), weight)
            return inherited(layer, name, weight, regularizer)

        setattr(layer_class, _HOOK, regularize)
        patched.append((layer_class, own))
    try:
        yield
    finally:
        for layer_class, own in patched:
            if own is None:
                delattr(layer_class, _HOOK)
            else:
                setattr(layer_class, _HOOK, own)


def _tf1_layer_classes():
    classes = []
    for module_name in _TF1_LAYER_MODULES:
        try:
            classes.append(importlib.import_module(module_name).Layer)
        except ImportError:
            continue
    return classes
