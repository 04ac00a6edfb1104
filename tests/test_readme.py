"""The README's sample outputs and figures are what the code prints today:
the dry run's output, the flags with their defaults. (Its sample run is
checked in test_output.py against a fresh run; MNIST's accuracy claim in
test_mnist_train.py.)"""

import re

import pytest
from conftest import REPO, run_script

README = (REPO / "README.md").read_text()


def readme_block(command_line):
    """The lines of the README's code block after `$ COMMAND_LINE`."""
    start = README.index("$ %s\n" % command_line) + len(command_line) + 3
    return README[start : README.index("```", start)]


def readme_defaults(paragraph_start):
    """{flag: default} of a README paragraph: `--flag` (DEFAULT, ...).

    Only the parentheses that open with a number or a path are defaults
    ('(1,000,000)', '(/tmp/mnist_data)', '(0.01)'); others explain.
    """
    start = README.index(paragraph_start)
    paragraph = README[start : README.index("\n\n", start)]
    return {
        name: found.group(0).replace(",", "")
        for name, text in re.findall(r"`--(\w+)`\s+\(([^)]*)\)", paragraph)
        for found in [re.match(r"[\d,.]+(?<![,.])|/[\w/]+", text)]
        if found
    }


def help_defaults(script):
    """{flag: default} of a script's --help: '  --flag (default: D; ...'."""
    return dict(
        re.findall(
            r"^  --(?:\[no\])?(\w+) \(default: ([^;)]*)",
            run_script(script, "--help").stdout,
            re.M,
        )
    )


def test_the_dry_run_sample_is_what_the_dry_run_prints():
    command = "python cifar10_multi_gpu_train.py --dry_run --num_gpus=8"
    result = run_script(*command.split()[1:])
    assert result.stdout == readme_block(command)


@pytest.mark.parametrize(
    "script, paragraph_start, count",
    [
        ("cifar10_train.py", "Main flags of the trainers:", 8),
        ("mnist_multi_gpu_train.py", "Main flags: `--num_gpus`", 7),
    ],
)
def test_the_flags_the_readme_lists_have_the_defaults_it_gives(
    script, paragraph_start, count
):
    listed = readme_defaults(paragraph_start)
    assert len(listed) == count, listed
    defaults = help_defaults(script)
    assert {name: _value(defaults[name]) for name in listed} == {
        name: _value(default) for name, default in listed.items()
    }


def _value(text):
    """A number as a float ('0' and '0.0' alike), anything else as text."""
    try:
        return float(text)
    except ValueError:
        return text
