"""What a user sees: each line once, no C++ start-up notices, installed
commands that explain their flags, defaults that run without a GPU."""

import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_script
from test_cifar10_train import _write_infinite_checkpoint

# The installed commands (pyproject.toml): the script each one runs, and a
# flag of that script its help must list.
COMMANDS = {
    "cifar10-train": ("cifar10_train.py", "max_steps"),
    "cifar10-multi-gpu-train": ("cifar10_multi_gpu_train.py", "num_gpus"),
    "cifar10-eval": ("cifar10_eval.py", "num_examples"),
    "mnist-multi-gpu-train": ("mnist_multi_gpu_train.py", "num_epochs"),
}
# TensorFlow's C++ INFO lines, e.g. 'I0000 00:00:1795457070.800225 ...'.
CPP_INFO_LINE = re.compile(r"^I\d{4} \d\d:\d\d:\d\d", re.MULTILINE)


def _user_env():
    """The environment of a user who set no TensorFlow log level."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


def _run_as_user(script, *args):
    """Runs a script with the environment of `_user_env`."""
    return subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_user_env(),
        cwd=REPO,
    )


def _flag_names(help_text):
    return sorted(re.findall(r"^  --(?:\[no\])?(\w+):", help_text, re.M))


@pytest.mark.slow
def test_a_save_is_logged_once_and_no_cpp_or_deprecation_notice_shows(
    cifar10_data_dir, tmp_path
):
    result = _run_as_user(
        "cifar10_train.py",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % tmp_path,
        "--max_steps=2",
        "--batch_size=8",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    saving = "Saving checkpoints for 2 into %s" % (tmp_path / "model.ckpt")
    assert output.count(saving) == 1, output
    assert CPP_INFO_LINE.findall(output) == [], output
    assert "absl::InitializeLog" not in output
    assert "oneDNN custom operations are on" not in output
    resumed = _run_as_user(
        "cifar10_train.py",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % tmp_path,
        "--max_steps=3",
        "--batch_size=8",
    )
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output
    assert "training from step 2" in output
    assert "deprecated" not in output, output


@pytest.mark.slow
def test_a_diverged_run_is_reported_in_one_line(cifar10_data_dir, tmp_path):
    _write_infinite_checkpoint(tmp_path, 50)
    result = _run_as_user(
        "cifar10_train.py",
        "--data_dir=%s" % cifar10_data_dir,
        "--train_dir=%s" % tmp_path,
        "--max_steps=60",
        "--batch_size=8",
    )
    assert result.returncode == 1
    assert result.stderr.count("Infinity in Histogram") == 1, result.stderr
    # The C++ side of stderr may add its last warnings after this line.
    errors = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("cifar10_train.py: error: ")
    ]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(
        "cifar10_train.py: error: the model diverged at step 51 (Infinity in "
        "Histogram for: "
    )
    assert errors[0].endswith(
        "); stopped without saving it, the newest checkpoint is %s"
        % (tmp_path / "model.ckpt-50")
    )


def test_a_user_set_log_level_is_kept_as_it_is():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from multigpu import quiet_cpp_logs; "
            "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(_user_env(), TF_CPP_MIN_LOG_LEVEL="0"),
        cwd=REPO,
    )
    assert result.stdout == "0\n", result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_installed_command_lists_the_flags_of_its_script(command):
    path = os.path.join(os.path.dirname(sys.executable), command)
    assert os.path.exists(path), "not installed: pip install -e ."
    installed = subprocess.run(
        [path, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_user_env(),
        cwd=REPO,
    )
    script, flag = COMMANDS[command]
    assert installed.returncode == 0, installed.stderr
    names = _flag_names(installed.stdout)
    assert names == _flag_names(run_script(script, "--help").stdout)
    assert flag in names


def test_the_mnist_converter_is_an_installed_command():
    path = os.path.join(os.path.dirname(sys.executable), "mnist-convert")
    result = subprocess.run(
        [path, "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "--idx_dir" in result.stdout and "--data_dir" in result.stdout


@pytest.mark.slow
def test_the_mnist_trainer_runs_its_one_tower_on_the_cpu_by_default(
    tmp_path,
):
    result = run_script(
        "mnist_multi_gpu_train.py",
        "--fake_data",
        "--data_dir=%s" % (tmp_path / "data"),
        "--train_dir=%s" % (tmp_path / "train"),
        "--num_epochs=1",
        "--batch_size=500",
    )
    assert (
        result.stdout.count(
            "No GPU visible: the one tower runs on the CPU (/cpu:0)\n"
        )
        == 1
    )
    # 3,000 sample images in batches of 500.
    assert "Done training for 1 epochs, 6 steps." in result.stdout
