"""The eval takes the trainers' --force_cpu_bfloat16 and scores in bfloat16."""

import re

import pytest
from conftest import run_script, trainer_flags

from multigpu.graph import placement


@pytest.mark.slow
def test_the_eval_scores_in_bfloat16_as_a_force_cpu_bfloat16_run_trained(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    run_script(
        "cifar10_train.py",
        "--max_steps=1",
        "--use_fp16",
        "--force_cpu_bfloat16",
        *trainer_flags(cifar10_data_dir, train_dir),
    )
    result = run_script(
        "cifar10_eval.py",
        "--use_fp16",
        "--force_cpu_bfloat16",
        "--run_once",
        "--fake_data",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % (tmp_path / "eval"),
        "--batch_size=4",
        "--num_examples=8",
    )
    instructions = (
        "which has bfloat16 instructions"
        if placement.cpu_has_bfloat16()
        else "emulated without its instructions (--force_cpu_bfloat16)"
    )
    assert (
        "--use_fp16: computing in bfloat16 on the CPU, %s (variables stay "
        "float32)" % instructions
    ) in result.stdout.splitlines()
    assert re.search(r": precision @ 1 = [01]\.\d{3}\n", result.stdout)
    assert "WARNING: --use_fp16" not in result.stderr
