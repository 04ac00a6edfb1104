"""The agreement's line names every flag that differs, each task's value.

The model's variables are named only when every flag agrees: a flag such
as --model changes them too, and the flags are what to fix.
"""

from multigpu.distributed import agreement


def test_every_differing_flag_is_named_with_every_tasks_value():
    line = agreement.difference(
        [
            {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
            {"batch_size": 8, "learning_rate": 0.1, "model": "resnet20"},
        ]
    )
    assert line == (
        "2 flags differ between the workers: --batch_size (worker task 0 "
        "has 4, worker task 1 has 8), --model (worker task 0 has "
        '"tutorial", worker task 1 has "resnet20"); start every worker with '
        "the same flags (docs/cluster.md)"
    )


def test_the_variables_are_not_named_beside_a_differing_flag():
    line = agreement.difference(
        [
            {"model": "tutorial", agreement.VARIABLES: "10 variables"},
            {"model": "resnet20", agreement.VARIABLES: "65 variables"},
        ]
    )
    assert line == (
        '--model differs between the workers: worker task 0 has "tutorial", '
        'worker task 1 has "resnet20"; start every worker with the same '
        "--model (docs/cluster.md)"
    )


def test_variables_that_differ_under_equal_flags_are_named():
    line = agreement.difference(
        [
            {"model": "mine:logits", agreement.VARIABLES: "10 variables"},
            {"model": "mine:logits", agreement.VARIABLES: "12 variables"},
        ]
    )
    assert line == (
        "the model's variables differ between the workers: worker task 0 has "
        '"10 variables", worker task 1 has "12 variables"; every worker must '
        "run the same model code (docs/cluster.md)"
    )
