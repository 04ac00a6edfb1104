"""A flag of training given to a mode that trains nothing: exit 1, one line.

`tests/test_flag_checks.py` holds the table of verdicts; these run the
scripts in full for the exit code, the line and the files left alone.
"""

import pytest
from conftest import error_line


@pytest.mark.slow
def test_mnist_eval_only_refuses_num_gpus_and_writes_nothing(tmp_path):
    line = error_line(
        "mnist_multi_gpu_train.py",
        "--eval_only",
        "--num_gpus=2",
        "--fake_data",
        "--data_dir=%s" % (tmp_path / "data"),
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert line == (
        "mnist_multi_gpu_train.py: error: --num_gpus=2 does not apply with "
        "--eval_only, which scores the newest checkpoint of --train_dir on "
        "the test set, training nothing, so it would be ignored; drop "
        "--num_gpus (or --eval_only)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_dry_run_refuses_max_steps_and_writes_nothing(tmp_path):
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--num_gpus=2",
        "--max_steps=5",
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --max_steps=5 does not apply "
        "with --dry_run, which builds the graph and prints its plan, with no "
        "session, no data and no file written, so it would be ignored; drop "
        "--max_steps (or --dry_run)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_force_cpu_bfloat16_is_refused_where_the_towers_are_gpus():
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--num_gpus=2",
        "--use_fp16",
        "--force_cpu_bfloat16",
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --force_cpu_bfloat16 applies "
        "only to towers on the CPU, and this run computes on GPUs, in "
        "float16, so it would be ignored; drop --force_cpu_bfloat16"
    )
