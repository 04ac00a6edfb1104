"""Building the towers, their losses and gradients, and the names of their
copies of the variables.

Tower i's copy of a variable is named towers/replica_i/<the variable's
name> (`replica_name`), made by `variable_update`'s tower plan;
`primary_name` reads the variable's name back from a copy's, and
`model_variables_with_copies` finds a graph's trainable variables with
their copies.
"""

import contextlib
import re

import tensorflow as tf

from multigpu.graph import placement

# Prefix of the name scope of each tower, as in the TF1 tutorial: tower_0, ...
TOWER_NAME = "tower"
# The name scope that holds the towers' ('towers/tower_0/', ...): one block
# of TensorBoard's graph.
TOWERS_SCOPE = "towers"
# Tower i's copies of the variables are named TOWERS_SCOPE/REPLICA_SCOPE_i/
# <name>.
REPLICA_SCOPE = "replica"
# The name scope, inside a tower's, of the staging of its batch
# (`stage_on_device`).
STAGING_SCOPE = "staging_area"


def tower_scope(index):
    """'towers/tower_<index>/': the name scope of tower index."""
    return "%s/%s_%d/" % (TOWERS_SCOPE, TOWER_NAME, index)


def strip_tower_prefix(name):
    """Returns `name` without its 'towers/tower_N/' scopes (summary tags)."""
    return re.sub("(%s/)?%s_[0-9]+/" % (TOWERS_SCOPE, TOWER_NAME), "", name)


# Whether the trainers stage each tower's next batch on its device
# (`stage_on_device`): as fast as reading it in the step on the CPU path
# (0.97x to 1.00x, benchmarks/bench_options.py), and it overlaps the
# host-to-device copy with the compute on GPUs.
PREFETCH_TO_DEVICE_DEFAULT = True


def add_cross_entropy(logits, labels):
    """Adds the mean cross-entropy of a batch to the `losses` collection.

    A tower's loss is then `tower_total_loss` of its scope.

    Args:
      logits: float32 [batch, num_classes].
      labels: int32 [batch] in 0..num_classes - 1.

    Returns:
      float32 scalar named 'cross_entropy'.
    """
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int64), logits=logits
    )
    cross_entropy_mean = tf.reduce_mean(cross_entropy, name="cross_entropy")
    tf.compat.v1.add_to_collection("losses", cross_entropy_mean)
    return cross_entropy_mean


def tower_total_loss(scope):
    """Sums one tower's `losses` and the model's regularization terms.

    The model's loss function adds the cross-entropy of the tower's batch
    and, per weight, a weight-decay term; filtering by the tower's scope
    keeps the other towers' terms out. The layers' regularizers are in
    another collection (see `regularization_losses`).

    Args:
      scope: str, the tower's name scope, e.g. 'towers/tower_1/'.

    Returns:
      A float32 scalar tensor named '<scope>total_loss': the loss the
      tower's gradients are taken of.
    """
    return tf.add_n(
        tf.compat.v1.get_collection("losses", scope)
        + regularization_losses(scope),
        name="total_loss",
    )


# The scopes of one tower's terms: its name scope and its copies' names.
_TOWER_TAG = re.compile(
    r"(%s/)?(%s|%s)_([0-9]+)/" % (TOWERS_SCOPE, TOWER_NAME, REPLICA_SCOPE)
)


def regularization_losses(scope):
    """The model's regularization terms for one tower, each counted once.

    A variable's regularizer adds its term to REGULARIZATION_LOSSES when
    the variable (or a tower's copy of it) is made: with the towers sharing
    the variables, once, in the first tower, which the other towers then
    count too (the Inception trainer adds them to every tower's loss). A
    tower that made its own term of a variable (its copy's, in replicated
    mode; a TF1 layer's, which takes it again in every tower in reduced
    precision, of the float32 variable: `any_model`) counts that one
    instead.

    Args:
      scope: str, the tower's name scope, e.g. 'towers/tower_1/'; '' for a
        model built outside the towers.

    Returns:
      A list of float32 scalars (empty for a model without regularizers).
    """
    match = _TOWER_TAG.search(scope)
    index = match.group(3) if match else None
    terms = {}
    for each in tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES
    ):
        tags = _TOWER_TAG.findall(each.op.name)
        name = _TOWER_TAG.sub("", each.op.name)
        if name not in terms or any(tag[2] == index for tag in tags):
            terms[name] = each
    return [tf.cast(each, tf.float32) for each in terms.values()]


def batch_norm_updates(scope):
    """The update ops (batch-norm moving statistics) built in one scope.

    The trainers run those of the last tower with every step, as the
    Inception multi-GPU trainer does: the statistics accumulate so fast
    that one tower's batches suffice, and the others' updates would only
    race with them.

    Args:
      scope: str, a tower's name scope; None for every update op.

    Returns:
      A list of ops (empty for a model without batch norm).
    """
    return tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, scope)


@contextlib.contextmanager
def tower(variables, xla=False):
    """Builds one tower: its devices, name scope and variables.

    Inside, a model creates or reads its variables, and their ops go to the
    tower's variable device, whatever library the model's layers come from
    (`placement.device_function`); every other op runs on the tower's
    device unless it sets its own (e.g. the input, on the CPU). Tower 0
    creates the variables, every other tower reuses them, or its own
    copies (`variables.getter`).

    With xla, the tower (its forward and backward pass) is built inside its
    own `tf.xla.experimental.jit_scope`, so XLA compiles the ops of that
    scope that it can and leaves the rest (input, staging, summaries) to
    TensorFlow. An explicit scope is used rather than the session's
    `global_jit_level`: auto-clustering skips CPUs unless TF_XLA_FLAGS is set
    before TensorFlow loads, and it would also cluster the gradient
    averaging and the update, which belong to no tower. On a CPU, Grappler
    fuses each forward convolution with its bias and ReLU (_FusedConv2D)
    before XLA clusters the graph, so those stay in TensorFlow too; there
    the compiled step matches TensorFlow's to 1e-4 of each update and is
    slower (0.84x, benchmarks/bench_options.py): XLA is for GPUs.

    Args:
      variables: the tower's `variable_update.TowerVariables`.
      xla: bool, compile the tower with XLA.

    Yields:
      str, the tower's name scope, 'towers/tower_<index>/'.
    """
    with (
        tf.compat.v1.device(
            placement.device_function(
                variables.device, variables.variable_device
            )
        ),
        tf.name_scope(tower_scope(variables.index)) as scope,
        _jit_scope(xla),
        tf.compat.v1.variable_scope(
            tf.compat.v1.get_variable_scope(),
            reuse=True if variables.index > 0 else None,
            custom_getter=variables.getter,
            auxiliary_name_scope=False,
        ),
    ):
        yield scope


def _jit_scope(xla):
    if xla:
        return tf.xla.experimental.jit_scope()
    return contextlib.nullcontext()


def stage_on_device(tensors):
    """Stages tensors on the current device, one step ahead.

    Call it inside a tower's device and name scope, with the batch the tower
    would take from the shared CPU input. The tower computes on the batch
    staged at the previous step, while `put_op` takes the next batch from
    the input and copies it to the device: on a GPU the host-to-device copy
    overlaps the compute (tf_cnn_benchmarks' StagingArea). The area lives
    in the session's device memory: each new session needs one `put_op`
    before its first step (`WarmUpHook`), and only runs that also run
    `put_op` (the train op) may fetch the staged tensors, or the next step
    finds the area empty and waits forever.

    Args:
      tensors: list of tensors, e.g. [images, labels] from the iterator.

    Returns:
      staged: list of tensors of the same dtypes and shapes, on the device.
      put_op: the op that stages `tensors`; run it with every step.
    """
    # Stage and Unstage find their area on the device by its unique name.
    with tf.name_scope(STAGING_SCOPE) as shared_name:
        put_op = tf.raw_ops.Stage(
            values=tensors, shared_name=shared_name, name="put"
        )
        staged = tf.raw_ops.Unstage(
            dtypes=[t.dtype for t in tensors],
            shared_name=shared_name,
            name="get",
        )
    for tensor, each in zip(tensors, staged):
        each.set_shape(tensor.shape)
    return list(staged), put_op


def clip_gradients(grads_and_vars, clip_norm):
    """Scales the gradients so that their global norm is at most clip_norm.

    Args:
      grads_and_vars: list of (gradient, variable).
      clip_norm: float > 0.

    Returns:
      The list of (clipped gradient, variable), None gradients kept.
    """
    grads, variables = zip(*grads_and_vars)
    clipped, _ = tf.clip_by_global_norm(list(grads), clip_norm)
    return list(zip(clipped, variables))


class WarmUpHook(tf.compat.v1.train.SessionRunHook):
    """Runs ops once in every new session, before its first step.

    E.g. the first `put_op` of `stage_on_device`. A resumed run makes a new
    session, so it stages its first batch again.
    """

    def __init__(self, ops):
        self._ops = ops

    def after_create_session(self, session, coord):
        session.run(self._ops)


def identity_beside(grad):
    """An identity of grad on grad's device (None for None)."""
    if grad is None:
        return None
    with tf.device(grad.device):
        return tf.identity(grad)


def replica_name(index, name):
    """'towers/replica_<index>/<name>': the name of tower index's copy of
    name, in the graph's towers block."""
    return "%s/%s_%d/%s" % (TOWERS_SCOPE, REPLICA_SCOPE, index, name)


def primary_name(name):
    """The name of the variable a copy copies, or None for no copy."""
    match = _COPY_NAME.match(name)
    return match.group(1) if match else None


_COPY_NAME = re.compile("%s/%s_[0-9]+/(.+)" % (TOWERS_SCOPE, REPLICA_SCOPE))


def model_variables_with_copies(graph):
    """The trainable variables and the towers' copies of them."""
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = {var.op.name for var in trainable}
    copies = [
        var
        for var in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        if primary_name(var.op.name) in names
    ]
    return trainable + copies
