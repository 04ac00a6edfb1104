"""The session options of the TF1 notes: GPU memory and thread pools."""

import pytest
import tensorflow as tf
from conftest import run_script
from google.protobuf import text_format
from helpers.scripts import run_code

from multigpu.graph import placement

# Runs a script's main with its flags, stopping at the first ConfigProto it
# builds, which it prints: the config the script's sessions would get.
_PRINT_CONFIG = """
import sys
from absl import app
from multigpu.graph import placement
import {module} as script

def print_config(*args, **kwargs):
    print(placement_session_config(*args, **kwargs))
    sys.exit(0)

placement_session_config = placement.session_config
placement.session_config = print_config
app.run(script.main, argv=sys.argv)
"""


def script_config(module, *args):
    """The first `ConfigProto` the script's main builds with these flags."""
    result = run_code(_PRINT_CONFIG.format(module=module), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return text_format.Parse(result.stdout, tf.compat.v1.ConfigProto())


SESSION_FLAGS = (
    "--allow_growth",
    "--gpu_memory_fraction=0.4",
    "--num_intra_threads=3",
    "--num_inter_threads=2",
)


@pytest.mark.parametrize(
    "module, args",
    [
        ("cifar10_train", ()),
        ("cifar10_multi_gpu_train", ("--cpu_towers",)),
        ("cifar10_eval", ()),
        ("mnist_multi_gpu_train", ("--cpu_towers",)),
    ],
)
def test_each_script_puts_the_session_flags_in_its_config_proto(module, args):
    config = script_config(module, *SESSION_FLAGS, *args)

    assert config.gpu_options.allow_growth is True
    assert config.gpu_options.per_process_gpu_memory_fraction == 0.4
    assert config.intra_op_parallelism_threads == 3
    assert config.inter_op_parallelism_threads == 2
    assert config.allow_soft_placement is True


def test_without_options_the_config_keeps_tensorflows_defaults():
    config = placement.session_config()

    assert config.gpu_options.allow_growth is False
    assert config.gpu_options.per_process_gpu_memory_fraction == 0.0
    assert config.intra_op_parallelism_threads == 0
    assert config.inter_op_parallelism_threads == 0


def test_session_config_carries_the_options_given():
    options = placement.SessionOptions(True, 0.25, 1, 4)

    config = placement.session_config(["/cpu:0", "/cpu:1"], options=options)

    assert config.gpu_options.allow_growth is True
    assert config.gpu_options.per_process_gpu_memory_fraction == 0.25
    assert config.intra_op_parallelism_threads == 1
    assert config.inter_op_parallelism_threads == 4
    assert config.device_count["CPU"] == 2


def test_a_memory_fraction_above_one_is_a_one_line_error(tmp_path):
    result = run_script(
        "cifar10_train.py",
        "--gpu_memory_fraction=1.5",
        "--train_dir=%s" % tmp_path,
        expect_success=False,
    )

    assert result.returncode == 1
    assert "--gpu_memory_fraction" in result.stderr
    assert "Traceback" not in result.stderr
