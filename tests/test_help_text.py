"""The installed commands' --help: grouped, our flags only, real pointers."""

import ast
import importlib
import os
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO
from helpers.output_lines import script_help, tensorflow_lines
from helpers.scripts import user_env

# The installed commands (pyproject.toml): the script each one runs, and the
# groups of its --help, in order.
COMMANDS = {
    "cifar10-train": (
        "cifar10_train.py",
        ["Data and batches", "Model", "Training", "GPUs and devices"]
        + ["Reduced precision", "Output"],
    ),
    "cifar10-multi-gpu-train": (
        "cifar10_multi_gpu_train.py",
        ["Data and batches", "Model", "Training", "GPUs and devices"]
        + ["Reduced precision", "Cluster", "Output"],
    ),
    "cifar10-eval": (
        "cifar10_eval.py",
        ["Data and batches", "Model", "Evaluation", "GPUs and devices"]
        + ["Reduced precision"],
    ),
    "mnist-multi-gpu-train": (
        "mnist_multi_gpu_train.py",
        ["Data and batches", "Training", "Evaluation", "GPUs and devices"]
        + ["Cluster", "Output"],
    ),
}


# What a --help must not name: the suite's modules and functions
# ('towers.build_towers'), its packages, its tests.
INTERNAL_NAME = re.compile(
    r"`\w+\.\w+`|\b(tests|multigpu|data_sets)/|\b(towers|checkpoints)\.\w"
)


def _flag_groups(help_text):
    """The group titles of a --help, after the description."""
    flags_part = help_text.split("\n\nData and batches:\n", 1)[1]
    return ["Data and batches"] + re.findall(r"^(\w[\w ]+):$", flags_part, re.M)


def _installed_help(command):
    """`COMMAND --help` of the installed command, as a user runs it.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    path = os.path.join(os.path.dirname(sys.executable), command)
    assert os.path.exists(path), "not installed: pip install -e ."
    return subprocess.run(
        [path, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=user_env(),
        cwd=REPO,
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_installed_command_prints_the_grouped_help_of_its_script(command):
    installed = _installed_help(command)
    script, groups = COMMANDS[command]
    assert installed.returncode == 0, installed.stderr
    from_script = script_help(script)
    assert installed.stderr == ""
    # The same help, the commands named as installed: cifar10-eval, not
    # python cifar10_eval.py.
    description = ast.get_docstring(ast.parse((REPO / script).read_text()))
    assert from_script.stdout.startswith(description + "\n\nData and batches:")
    assert re.findall(r"python \w+\.py", installed.stdout) == []
    assert len(re.findall(r"^  %s " % command, installed.stdout, re.M)) == (
        len(re.findall(r"^  python %s\b" % script, description, re.M))
    )
    assert installed.stdout.count("\n") == from_script.stdout.count("\n")
    assert (
        installed.stdout.split("\n\nData and batches:")[1]
        == (from_script.stdout.split("\n\nData and batches:")[1])
    )
    assert _flag_groups(installed.stdout) == groups
    assert INTERNAL_NAME.findall(installed.stdout) == []
    assert tensorflow_lines(installed) == tensorflow_lines(from_script) == []


def test_the_mnist_converter_is_an_installed_command():
    result = _installed_help("mnist-convert")
    assert result.returncode == 0, result.stderr
    assert "--idx_dir" in result.stdout and "--data_dir" in result.stdout
    assert result.stderr == ""
    from_script = script_help("mnist_input.py")
    assert (from_script.stdout, from_script.stderr) == (result.stdout, "")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_help_text_names_only_the_scripts_own_flags(command):
    script, _ = COMMANDS[command]
    help_text = script_help(script).stdout
    flags_part = help_text.split("\n\nData and batches:\n", 1)[1]
    own = set(re.findall(r"^  --(?:\[no\])?(\w+) \(", flags_part, re.M))
    # A flag of the trainer, named in the eval's help as such, is not its.
    named = re.findall(r"(?<!trainer's )--(?:no)?(\w+)", flags_part)
    assert sorted(set(named) - own - {"helpfull", "verbosity"}) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_pages_and_sections_a_help_text_points_to_exist(command):
    script, _ = COMMANDS[command]
    help_text = " ".join(script_help(script).stdout.split())
    readme = (REPO / "README.md").read_text()
    pages = re.findall(r"\bdocs/[\w-]+\.md", help_text)
    sections = re.findall(r'README, "([^"]+)"', help_text)
    assert [page for page in pages if not (REPO / page).is_file()] == []
    assert [each for each in sections if "## " + each not in readme] == []


# The verification tools' commands (pyproject.toml): the module each runs.
TOOLS = {
    "tf1-equivalence": "verification.equivalence",
    "tf1-accidents": "verification.accidents",
    "tf1-planted-bugs": "verification.planted_bugs",
}


def test_the_verification_tools_are_installed_commands_of_the_package():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    scripts = pyproject["project"]["scripts"]
    assert {
        command: target
        for command, target in scripts.items()
        if target.startswith("verification.")
    } == {command: module + ":main" for command, module in TOOLS.items()}
    assert "verification" in pyproject["tool"]["setuptools"]["packages"]
    for module in TOOLS.values():
        assert callable(importlib.import_module(module).main)
