"""The equivalence runner's product: the cells it trains and their options.

Variable update x all-reduce x model x precision x towers, the slice of it
that the tests run, and the models by name.
"""

import itertools

import tensorflow as tf

from cifar10_models import registry
from multigpu.graph import step_optimizer
from verification import equivalence_models, equivalence_workers
from verification.equivalence_table import Case

# Every model the trainers' --model names, two that use other APIs and
# two of the official ResNet's idioms.
MODELS = {
    **registry.MODELS,
    "layers": equivalence_models.LAYERS_MODEL,
    "get_variable": equivalence_models.GET_VARIABLE_MODEL,
    "custom_getter": equivalence_models.CUSTOM_GETTER_MODEL,
    "trainable_decay": equivalence_models.TRAINABLE_DECAY_MODEL,
}
# The reduced precision: float16 with a loss scale, as on GPUs; CPU towers
# compute float16 too (slowly), so that the scaling runs here.
REDUCED = tf.float16
PRECISIONS = {
    "float32": (tf.float32, None),
    "float16 fixed": (REDUCED, step_optimizer.LossScaling(128.0, False, 1000)),
    "float16 dynamic": (REDUCED, step_optimizer.LossScaling(128.0, True, 1000)),
}
TOWER_COUNTS = (1, 2, 4)
# The --clip_gradients of the clipped cells: under the global norm of the
# mean gradient at the start on the runner's batches of 2 towers (the
# tutorial net's 4.4, the layers model's 1.9; not the get_variable
# model's, 0.82), so that the clip binds and a clip of each tower's
# gradients before the mean shows; over a third of it, so that every
# weight still moves (the tutorial's local3 biases by 1.9e-4, at 1.0 by
# 9.2e-5). Gradients clipped per tower before the mean land 513,000
# tolerances out (the tutorial net, 2 towers).
CLIP_NORM = 1.5


def updates(on_gpus):
    """The (update, all-reduce) pairs of the product."""
    pairs = [("parameter_server", None)]
    pairs += [("replicated", "collective"), ("replicated", "one_device")]
    if on_gpus:
        pairs.append(("replicated", "nccl"))
    return pairs


def product(on_gpus, models=tuple(MODELS)):
    """Every cell; with one tower the all-reduce is moot, so one of each.

    Then each update and model clipped (float32, 2 towers), and the cells
    across workers (`equivalence_workers.cells`).
    """
    cells = []
    for (update, spec), model, precision, count in itertools.product(
        updates(on_gpus), models, PRECISIONS, TOWER_COUNTS
    ):
        if count == 1 and spec not in (None, "collective"):
            continue
        cells.append(Case(update, spec, model, precision, count))
    cells += [
        Case(update, spec, model, "float32", 2, CLIP_NORM)
        for (update, spec), model in itertools.product(updates(on_gpus), models)
    ]
    return cells + equivalence_workers.cells(models, PRECISIONS)


def all_reduce_names(on_gpus):
    """The all-reduce column's names in the product: the cells that
    `with_all_reduces` can keep."""
    names = [spec for _, spec in updates(on_gpus) if spec]
    return list(dict.fromkeys(names + list(equivalence_workers.ALL_REDUCES)))


def with_all_reduces(cells, names):
    """The cells whose all-reduce column is one of names (a
    parameter_server cell has none, so none of them)."""
    return [case for case in cells if case.all_reduce in names]


def picked(on_gpus, fast, models, all_reduces, columns):
    """The cells the runner's flags pick.

    Args:
      on_gpus: bool, whether the towers are GPUs.
      fast: bool, --fast: the `fast_slice`, else the `product`.
      models: None, or --models' names (`model_of`).
      all_reduces: None, or --all_reduces' names (`with_all_reduces`).
      columns: list of (flag, a field of `Case`, None or the names to
        `keep`).

    Raises:
      ValueError: a flag names a model, an all-reduce or a column's value
        that no cell has (so no flag leaves no cell): one line naming it.
    """
    for name in models or ():
        try:
            model_of(name)
        except ValueError as e:
            raise ValueError("--models: %s" % e) from None
    if fast:
        cells = fast_slice(models)
    else:
        cells = product(on_gpus, models or tuple(MODELS))
    if all_reduces:
        known = all_reduce_names(on_gpus)
        for name in all_reduces:
            if name not in known:
                raise ValueError(
                    "--all_reduces: no cell has all-reduce %r; the cells' "
                    "are %s" % (name, ", ".join(known))
                )
        cells = with_all_reduces(cells, all_reduces)
    for flag, column, names in columns:
        if names:
            cells = keep(cells, column, names, "--" + flag)
    return cells


def keep(cells, column, names, flag):
    """The cells whose column (a field of `Case`) is one of names.

    A value is written as its row shows it, a space as "_" ("float16_fixed").

    Raises:
      ValueError: a name no cell has: one line naming flag, the name and
        the cells' values.
    """
    known = list(
        dict.fromkeys(written(getattr(case, column)) for case in cells)
    )
    for name in names:
        if name not in known:
            raise ValueError(
                "%s: no cell has %s %r; the cells' are %s"
                % (flag, column, name, ", ".join(known))
            )
    return [case for case in cells if written(getattr(case, column)) in names]


def written(value):
    """A column's value as the flags take it: a space as "_"."""
    return str(value).replace(" ", "_")


def fast_slice(models=None):
    """Every mode and precision at least once, every model but the ResNet,
    and clipping.

    Its last cell crosses workers: 2 worker processes of 2 towers each.

    Args:
      models: None, or a list of names (`model_of`): then the same cells,
        each with each of those models instead.
    """
    cells = [
        Case("parameter_server", None, "tutorial", "float32", 2),
        Case("replicated", "collective", "tutorial", "float16 dynamic", 4),
        Case("replicated", "one_device", "layers", "float32", 2),
        Case("parameter_server", None, "layers", "float16 fixed", 2),
        Case("replicated", "collective", "get_variable", "float32", 4),
        Case("parameter_server", None, "get_variable", "float32", 4),
        Case("replicated", "collective", "tutorial", "float32", 2, CLIP_NORM),
        Case("replicated", "collective", "custom_getter", "float16 dynamic", 4),
        Case("replicated", "one_device", "trainable_decay", "float32", 2),
        Case(
            equivalence_workers.UPDATE, "collective", "tutorial", "float32", 4
        ),
    ]
    if models is None:
        return cells
    return list(
        dict.fromkeys(
            case._replace(model=model) for model in models for case in cells
        )
    )


def model_of(name):
    """The `registry.Model` of a key of MODELS or a user's MODULE:FUNCTION.

    Raises:
      ValueError: neither (one line, as the trainers' --model says it).
    """
    return MODELS.get(name) or registry.user_model(name)


# The ResNet's cell of the tests (a minute on 2 CPU cores).
RESNET_CELL = Case("replicated", "collective", "resnet20", "float32", 2)
