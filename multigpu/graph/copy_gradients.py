"""A tower's gradients, the gradient of every copy of a variable it reads
counted.

In replicated mode a tower's model reads its own copy of each variable
(`variable_update.tower_plan`), but its loss may read other copies too: a
weight decay written over `tf.compat.v1.trainable_variables()` (TensorFlow's
official ResNet's) reads tower 0's variables from every tower. Every copy
holds the variable's value, so the loss's gradient of the variable is the
sum of its gradients of every copy it reads; taken of its own copy only,
the decay of towers 1 to N - 1 would be lost, and the reduced gradient
would carry 1/N of it.
"""

import tensorflow as tf

from multigpu.graph import copy_names, variable_update


def tower_gradients(opt, loss, tower):
    """The tower's gradient of each trainable variable, for its own copy.

    A loss that reads the tower's own copies only takes the gradients that
    `opt.compute_gradients` of those copies gives, and no op more.

    Args:
      opt: the optimizer (maybe loss-scaled) whose `compute_gradients`
        the towers call.
      loss: float32 scalar, the tower's total loss.
      tower: the tower's `variable_update.TowerVariables`, its model built.

    Returns:
      A list of (gradient, the copy the tower reads), one per variable of
      `tf.compat.v1.trainable_variables()`, in its order; the gradient is
      None where the loss reads no copy of the variable.
    """
    names = [var.op.name for var in tf.compat.v1.trainable_variables()]
    own = variable_update.trainable_variables(tower)
    others = [
        var
        for var in copy_names.model_variables_with_copies(loss.graph)
        if all(var is not each for each in own)
    ]
    read = {name: [] for name in names}
    for grad, var in opt.compute_gradients(loss, own + others):
        if grad is not None:
            read[copy_names.primary_name(var.op.name) or var.op.name].append(
                grad
            )
    return [(_sum(read[name]), var) for name, var in zip(names, own)]


def _sum(grads):
    """The sum of a variable's gradients; None for none, one as it is."""
    if len(grads) <= 1:
        return grads[0] if grads else None
    return tf.math.add_n([tf.convert_to_tensor(grad) for grad in grads])
