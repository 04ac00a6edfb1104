"""The agreement's line names every flag that differs, each task's value.

The model's code is named only when every flag agrees (a flag such as
--model changes it too, and the flags are what to fix): its variables, or
else its ops.
"""

import pytest

from multigpu.distributed import agreement

VARIABLES = agreement.VARIABLES
OPS = agreement.OPS


@pytest.mark.parametrize(
    "settings_of_tasks, line",
    [
        (
            [
                {"batch_size": 4, "learning_rate": 0.1, "model": "tutorial"},
                {"batch_size": 8, "learning_rate": 0.1, "model": "resnet20"},
            ],
            "2 flags differ between the workers: --batch_size (worker task 0 "
            "has 4, worker task 1 has 8), --model (worker task 0 has "
            '"tutorial", worker task 1 has "resnet20"); start every worker '
            "with the same flags (docs/cluster.md)",
        ),
        (
            [
                {"model": "tutorial", VARIABLES: "10 variables"},
                {"model": "resnet20", VARIABLES: "65 variables"},
            ],
            '--model differs between the workers: worker task 0 has "tutorial"'
            ', worker task 1 has "resnet20"; start every worker with the same '
            "--model (docs/cluster.md)",
        ),
        (
            [
                {"model": "mine:logits", VARIABLES: "10 variables"},
                {"model": "mine:logits", VARIABLES: "12 variables"},
            ],
            "the model's variables differ between the workers: worker task 0 "
            'has "10 variables", worker task 1 has "12 variables"; every '
            "worker must run the same model code (docs/cluster.md)",
        ),
        (
            [
                {VARIABLES: "10 variables", OPS: "260 ops"},
                {VARIABLES: "12 variables", OPS: "262 ops"},
            ],
            "the model's variables differ between the workers: worker task 0 "
            'has "10 variables", worker task 1 has "12 variables"; every '
            "worker must run the same model code (docs/cluster.md)",
        ),
        (
            [
                {VARIABLES: "10 variables", OPS: "260 ops"},
                {VARIABLES: "10 variables", OPS: "261 ops"},
            ],
            "the model's ops differ between the workers: worker task 0 has "
            '"260 ops", worker task 1 has "261 ops"; every worker must run '
            "the same model code (docs/cluster.md)",
        ),
    ],
    ids=[
        "two_flags",
        "a_flag_and_the_variables",
        "the_variables_alone",
        "the_variables_and_the_ops",
        "the_ops_alone",
    ],
)
def test_the_line_names_every_differing_flag_or_else_the_model_code(
    settings_of_tasks, line
):
    assert agreement.difference(settings_of_tasks) == line


def test_a_ps_cluster_worker_is_named_by_its_own_task_index():
    # A ps-cluster worker compares itself with its chief alone.
    line = agreement.difference(
        [{"learning_rate": 0.1}, {"learning_rate": 0.05}], tasks=[0, 2]
    )
    assert line == (
        "--learning_rate differs between the workers: worker task 0 has 0.1,"
        " worker task 2 has 0.05; start every worker with the same "
        "--learning_rate (docs/cluster.md)"
    )


def test_the_default_learning_rate_is_named_as_the_models_own_recipe():
    line = agreement.difference(
        [{"learning_rate": 0.0}, {"learning_rate": 0.1}]
    )
    assert line == (
        "--learning_rate differs between the workers: worker task 0 has 0 "
        "(the model's own recipe), worker task 1 has 0.1; start every worker "
        "with the same --learning_rate (docs/cluster.md)"
    )


def test_a_chief_refused_by_the_ps_names_the_default_rate_as_its_own_recipe():
    with pytest.raises(ValueError) as refused:
        agreement.refuse_other_job(
            {"learning_rate": 0.05, "max_steps": 20, "job": {"id": "a1"}},
            {"learning_rate": 0.0, "max_steps": 30, "job": {"id": "a1"}},
            "127.0.0.1:2222",
        )
    assert str(refused.value) == (
        "the ps tasks hold a job started by a chief with other flags: "
        "--learning_rate (the job's chief has 0.05, this chief 0 (the "
        "model's own recipe)); start this chief with that job's flags to "
        "rejoin it, or stop every task of that job, its ps tasks too, to "
        "start a new one (docs/cluster.md)"
    )
