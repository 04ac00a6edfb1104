"""The arguments a variable scope's custom getter receives, by name.

TensorFlow calls a custom getter with keywords, but a model's own getter,
nested inside the towers' scopes, may pass them on by position, as TF1
allows: TensorFlow's official ResNet calls `getter(name, shape, dtype,
*args, **kwargs)`. The towers' getters read and change some of them, so
they take them all by name (`by_name`) and pass them on by name.
"""

# The parameters of TF1's getter (`tf.compat.v1.variable_scope`'s true
# getter), in the order a custom getter may pass them by position.
PARAMETERS = (
    "name",
    "shape",
    "dtype",
    "initializer",
    "regularizer",
    "reuse",
    "trainable",
    "collections",
    "caching_device",
    "partitioner",
    "validate_shape",
    "use_resource",
    "constraint",
    "synchronization",
    "aggregation",
)


def by_name(args, kwargs):
    """A getter's arguments, every one by its name.

    Args:
      args: tuple, the arguments given by position, in PARAMETERS' order.
      kwargs: dict, the arguments given by name.

    Returns:
      dict, parameter name -> value.

    Raises:
      TypeError: more arguments by position than TF1's getter takes, or
        one given both by position and by name (as Python's own call).
    """
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
