"""Building the towers, their losses and gradients, and the names of their
copies of the variables."""

import contextlib
import re

import tensorflow as tf

from multigpu.graph import placement

# Prefix of the name scope of each tower, as in the TF1 tutorial: tower_0, ...
TOWER_NAME = "tower"
# The name scope of the towers: one block of TensorBoard's graph.
TOWERS_SCOPE = "towers"
# Tower i's copies of the variables are TOWERS_SCOPE/REPLICA_SCOPE_i/<name>.
REPLICA_SCOPE = "replica"
# The name scope, in a tower's, of its batch's staging.
STAGING_SCOPE = "staging_area"


def tower_scope(index):
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
    """Adds the mean cross-entropy (float32 scalar) of logits (float32
    [batch, num_classes]) and labels (int32 [batch]) to `losses`."""
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int64), logits=logits
    )
    cross_entropy_mean = tf.reduce_mean(cross_entropy, name="cross_entropy")
    tf.compat.v1.add_to_collection("losses", cross_entropy_mean)
    return cross_entropy_mean


def tower_total_loss(scope):
    """float32 scalar '<scope>total_loss': the tower's `losses` and its
    regularization terms."""
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
    """The model's float32 regularization terms for one tower (scope, ''
    outside the towers): a term is made once per variable, in the first
    tower, which every tower then counts (as the Inception trainer does),
    unless the tower made its own (its copy's; a TF1 layer's in reduced
    precision, `any_model`).
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
    """The update ops (batch-norm moving statistics) built in scope
    (None: all). The trainers run the last tower's, as the Inception trainer
    does: one tower's batches suffice, and the others' would race.
    """
    return tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, scope)


@contextlib.contextmanager
def tower(variables, xla=False):
    """Builds one tower under its device function, name scope and
    variable scope; yields the scope.

    With xla, in its own `jit_scope`: the session's auto-clustering skips CPUs
    unless TF_XLA_FLAGS is set before TensorFlow loads, and would cluster the
    averaging and the update too. On a CPU the compiled step matches
    TensorFlow's to 1e-4 and is slower (0.84x, benchmarks/bench_options.py).
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
    """(staged tensors, put_op): the tower computes on the batch staged
    the step before while put_op copies the next (tf_cnn_benchmarks'
    StagingArea). Each new session needs one put_op before its first step
    (`WarmUpHook`), and only runs that run put_op may fetch the staged
    tensors, or the next step waits forever.
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
    """The gradients scaled to a global norm of at most clip_norm > 0."""
    grads, variables = zip(*grads_and_vars)
    clipped, _ = tf.clip_by_global_norm(list(grads), clip_norm)
    return list(zip(clipped, variables))


class WarmUpHook(tf.compat.v1.train.SessionRunHook):
    """Runs ops once in every new session (a resumed run's too),
    before its first step."""

    def __init__(self, ops):
        self._ops = ops

    def after_create_session(self, session, coord):
        session.run(self._ops)


def identity_beside(grad):
    if grad is None:
        return None
    with tf.device(grad.device):
        return tf.identity(grad)


def replica_name(index, name):
    """'towers/replica_<index>/<name>'."""
    return "%s/%s_%d/%s" % (TOWERS_SCOPE, REPLICA_SCOPE, index, name)


def primary_name(name):
    """The name of the variable a copy copies, or None for no copy."""
    match = _COPY_NAME.match(name)
    return match.group(1) if match else None


_COPY_NAME = re.compile("%s/%s_[0-9]+/(.+)" % (TOWERS_SCOPE, REPLICA_SCOPE))


def model_variables_with_copies(graph):
    trainable = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    names = {var.op.name for var in trainable}
    copies = [
        var
        for var in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES)
        if primary_name(var.op.name) in names
    ]
    return trainable + copies
