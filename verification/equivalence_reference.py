"""The equivalence runner's one device: its slices of the batch, its mean
gradient, and what it keeps beside its weights.

What it keeps is built from the graph's own collections and TensorFlow's
classes, never from the suite's lists, so that a variable the towers
forget to average or a state they forget to keep shows as a difference
instead of cancelling: the moving averages' variables, the losses'
averages, the loss scale's state.
"""

import tensorflow as tf

from cifar10_models import registry
from multigpu.graph import step_optimizer, summaries
from verification import equivalence_transfer, equivalence_workers

# The losses' moving averages of the trainers' summaries (the tutorial's
# cifar10._add_loss_summaries decay).
LOSS_AVERAGE_DECAY = 0.9


def model_variables(before):
    """The global variables made since `before`: the model's own.

    Weights and batch-norm statistics, trainable or not, as the
    GLOBAL_VARIABLES collection holds them; call it after the model is
    built and before the optimizer makes its slots.

    Args:
      before: list of the global variables before the model was built.
    """
    return [
        var
        for var in tf.compat.v1.global_variables()
        if all(var is not each for each in before)
    ]


def loss_averages(slice_losses, total_loss, scope):
    """The moving averages (decay 0.9, from 0) of one slice's losses.

    Named as the trainers name theirs: 'summaries/cross_entropy/avg',
    'summaries/conv1/weight_loss/avg', ..., 'summaries/total_loss/avg'.

    Args:
      slice_losses: dict name ('cross_entropy') -> float32 scalar.
      total_loss: float32 scalar, the slice's loss with regularization.
      scope: str, the slice's name scope, stripped from the `losses`
        collection's names.

    Returns:
      The op that updates the averages.
    """
    named = dict(slice_losses)
    for each in tf.compat.v1.get_collection("losses", scope):
        named[each.op.name[len(scope) :]] = each
    named["total_loss"] = total_loss
    with tf.name_scope(summaries.SUMMARIES + "/"):
        averaged = [
            tf.identity(each, name=name) for name, each in named.items()
        ]
        averages = tf.compat.v1.train.ExponentialMovingAverage(
            LOSS_AVERAGE_DECAY, name="avg"
        )
        return averages.apply(averaged)


def loss_scale_state(scaling):
    """The loss scale's variables after finite steps; the op of one step.

    A fixed scale keeps its scale and counts nothing; a dynamic one counts
    each finite step as good (it grows only after `inc_every_n` of them)
    and skips none.

    Args:
      scaling: a `step_optimizer.LossScaling`, or None (no variables).

    Returns:
      A list of the ops of one step (empty for a fixed or no scale).
    """
    if scaling is None:
        return []
    get = tf.compat.v1.get_variable
    scale = tf.constant(scaling.initial_scale, tf.float32)
    get("loss_scale", initializer=scale, trainable=False)
    good = get(
        "loss_scale_good_steps",
        initializer=tf.constant(0, tf.int32),
        trainable=False,
    )
    if not scaling.dynamic:
        return []
    get(
        step_optimizer.SKIPPED_STEPS,
        initializer=tf.constant(0, tf.int64),
        trainable=False,
    )
    return [good.assign_add(1)]


def mean_gradient(opt, case, slice_losses, regularization, scale):
    """The whole batch's mean gradient: [(float32 gradient, variable)].

    Each slice's loss takes the towers' loss scale (a power of two, 1 in
    float32), so that its float16 backward pass rounds as a tower's does;
    the sum over the slices, divided by their number, is their mean. Where
    the cell's gradients cross the workers in 2 bytes a value, each slice's
    gradient is rounded and summed as they are there.
    """
    transfer_dtype = equivalence_workers.transfer_dtype(case)
    if transfer_dtype != "float32":
        return equivalence_transfer.mean_gradients(
            opt,
            [each + regularization for each in slice_losses],
            scale,
            transfer_dtype,
        )
    scaled_sum = scale * (tf.add_n(slice_losses) + case.towers * regularization)
    return [
        (grad / (scale * case.towers), var)
        for grad, var in opt.compute_gradients(scaled_sum)
    ]


def slices(model, compute_dtype, batch_images, batch_labels, case):
    """Each tower's slice of the batch in turn, on the shared variables.

    Returns:
      slice_losses: list of float32 scalars, each slice's cross-entropy
        plus its `losses` collection (the tutorial's weight decay).
      cross_entropy: float32 scalar, the last slice's.
      regularization: float32 scalar, the regularizers' terms, once.
      scope: str, the last slice's name scope.
    """
    pieces = zip(
        tf.split(batch_images, case.towers), tf.split(batch_labels, case.towers)
    )
    slice_losses, terms = [], None
    for k, (slice_images, slice_labels) in enumerate(pieces):
        with (
            tf.compat.v1.variable_scope(
                tf.compat.v1.get_variable_scope(), reuse=True if k else None
            ),
            tf.name_scope("slice_%d" % k) as scope,
        ):
            made = len(_regularization_terms())
            logits = registry.logits(model, slice_images, True, compute_dtype)
            # The regularizers' terms, once: those made with the variables.
            terms = terms or _regularization_terms()[made:]
            cross_entropy = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=slice_labels, logits=logits
                )
            )
            slice_losses.append(
                cross_entropy + tf.add_n([tf.constant(0.0)] + _losses(scope))
            )
    regularization = tf.add_n(
        [tf.constant(0.0)] + [tf.cast(t, tf.float32) for t in terms or []]
    )
    return slice_losses, cross_entropy, regularization, scope


# The ops that draw other numbers each time they run: dropout's masks
# (RandomUniform), noise layers. A tower draws its own, apart from the one
# device's slice, so no tolerance can hold the towers to the one device.
RANDOM_OPS = {
    "RandomUniform",
    "RandomUniformInt",
    "RandomStandardNormal",
    "TruncatedNormal",
    "RandomShuffle",
    "RandomGamma",
    "RandomPoisson",
    "RandomPoissonV2",
    "Multinomial",
}


def random_op(train_op):
    """An op drawing random numbers that a step of train_op runs (its name
    and type, as "name (type)"); None if none does.

    A variable's initializer is no input of the step: it is not found.
    """
    seen, pending = set(), [train_op]
    while pending:
        op = pending.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in RANDOM_OPS:
            return "%s (%s)" % (op.name, op.type)
        pending += [tensor.op for tensor in op.inputs]
        pending += op.control_inputs
    return None


def _regularization_terms():
    return tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES
    )


def _losses(scope):
    return tf.compat.v1.get_collection("losses", scope)
