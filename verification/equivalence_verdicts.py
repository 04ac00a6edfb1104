"""The equivalence runner's verdict on a cell: the one device's
`Reference`, and the towers' worst variable against it, or where a value
is not finite."""

import collections

from verification import equivalence_tolerance


def worst(case, values, reference):
    """The largest error in tolerances (inf: nothing compared, or a value
    not finite), where (`_not_finite`'s line for a value not finite), and
    that variable's smallest and largest spread over the measuring runs."""
    not_finite = _not_finite(case, values, reference)
    if not_finite:
        name, line = not_finite
        return float("inf"), line, reference.extremes.get(name, (0.0, 0.0))
    errors = equivalence_tolerance.errors(
        values, reference.values, reference.spread
    )
    name = max(errors, key=errors.get, default="(nothing compared)")
    largest = errors[name] if errors else float("inf")
    extremes = reference.extremes.get(name, (0.0, 0.0))
    if errors and name not in values:
        name += " (missing on the towers)"
    return largest, name, extremes


def _not_finite(case, values, reference):
    """The first variable, loss average or spread holding a NaN or an
    infinity, and a line naming it and where it came from: the one
    device, its measuring runs (their spreads), or the towers, looked at
    in that order (a one device that diverges takes the towers with it);
    None if every value is finite."""
    sources = [
        ("the one device", reference.values),
        ("the one device's measuring runs", reference.spread),
        ("the towers", values),
    ]
    for source, each in sources:
        found = equivalence_tolerance.not_finite(each)
        if found:
            name, kind = found
            line = "%s on %s: %s" % (kind, source, name)
            if source != "the towers" and case.precision != "float32":
                line += DIVERGES_IN_FLOAT16
            return name, line
    return None


# Said of a cell whose one device is not finite in float16.
DIVERGES_IN_FLOAT16 = (
    "; the model diverges in float16 on one device, so its float16 cells "
    "prove nothing (--precisions=float32 runs the others)"
)


Reference = collections.namedtuple(
    "Reference",
    "values spread weights runs settled extremes random_op",
    defaults=[None],
)
Reference.__doc__ = """The one device's values after the steps (name ->
array), the spreads the towers are held to (`equivalence_tolerance.
tolerance`: name -> float), the names of its trainable variables (list of
str), how many measuring runs it took (int), whether every variable had
two runs that agreed (bool), and each variable's smallest and largest
spread over the runs (`equivalence_tolerance.extremes`: name -> (float,
float)), and an op drawing random numbers in its step
(`equivalence_reference.random_op`: str; None if none, as it should be).
"""
