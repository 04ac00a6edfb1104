"""Weight decay on the float32 variables, whichever layer made it.

In reduced precision the towers' custom getter (`any_model`) hands each
layer a 16-bit cast of its float32 variable. `get_variable` applies its
`regularizer=` to the variable it made, the float32 one; a TF1 layer object
(`tf.compat.v1.layers`, and tf-slim's conv2d and fully_connected, built on
TensorFlow's copy of them) applies its `kernel_regularizer` to what
`get_variable` returned: the cast, whose square sum bfloat16 rounds to 8
significant bits. tf_cnn_benchmarks decays the float32 variables, and so do
the towers: while a model is built, the TF1 layers regularize the float32
variable behind each cast.
"""

import contextlib
import importlib

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
    """TF1 layers built in this scope regularize the float32 variables.

    Args:
      float32_of: dict, `cast.ref()` of a 16-bit cast -> the float32
        variable it casts; the custom getter fills it while the scope is
        open.

    Yields:
      Nothing; a layer regularizing a cast in the dict regularizes its
      variable instead (a float32 term), any other weight as before.
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
    """The TF1 layers' base classes installed here (tf-keras is an extra)."""
    classes = []
    for module_name in _TF1_LAYER_MODULES:
        try:
            classes.append(importlib.import_module(module_name).Layer)
        except ImportError:
            continue
    return classes
