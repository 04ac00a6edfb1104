"""The public surface of the 2017 CIFAR-10 tutorial modules, call by call.

Scripts written against the tutorial's `cifar10` and `cifar10_input` (and
the TF1 MNIST reading example's `inputs`) run on ours with only
`import tensorflow.compat.v1 as tf`.
"""

import subprocess
import sys

from absl import flags
from conftest import REPO, SCRIPT_ENV

import cifar10

TUTORIAL_FLAGS = ["batch_size", "data_dir", "use_fp16"]


def run_python(code, *args, cwd=REPO, timeout=300):
    """Runs code in a fresh Python with the repository on its path.

    Returns:
      str, its standard output; the test fails if it exits non-zero.
    """
    env = dict(SCRIPT_ENV, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result.stdout


def test_cifar10_defines_the_tutorials_three_flags_with_its_defaults():
    defaults = {name: flags.FLAGS[name].default for name in TUTORIAL_FLAGS}
    assert defaults == {
        "batch_size": 128,
        "data_dir": "/tmp/cifar10_data",
        "use_fp16": False,
    }
    assert {
        name: flags.FLAGS.find_module_defining_flag(name)
        for name in TUTORIAL_FLAGS
    } == dict.fromkeys(TUTORIAL_FLAGS, "cifar10")


# Imports the library modules together, then each CIFAR-10 script in turn,
# dropping the flags a script defines itself (--train_dir, ...) before the
# next import: only a flag two scripts define twice could still clash, and
# the three tutorial flags must come from cifar10 into each script's --help.
IMPORT_TOGETHER = """
from absl import flags
import cifar10, cifar10_input, mnist_input, mnist_model
FLAGS = flags.FLAGS
for name in ["cifar10_train", "cifar10_multi_gpu_train", "cifar10_eval"]:
    before = set(FLAGS)
    module = __import__(name)
    keys = {flag.name for flag in FLAGS.get_key_flags_for_module(module)}
    tutorial = {"batch_size", "data_dir", "use_fp16"}
    own_flags = set(FLAGS) - before
    print(name, sorted(keys & tutorial), sorted(own_flags & tutorial))
    for own in own_flags:
        delattr(FLAGS, own)
"""


def test_the_cifar10_scripts_import_together_and_adopt_the_tutorial_flags():
    assert run_python(IMPORT_TOGETHER).splitlines() == [
        "%s %s []" % (name, TUTORIAL_FLAGS)
        for name in [
            "cifar10_train",
            "cifar10_multi_gpu_train",
            "cifar10_eval",
        ]
    ]
