"""tf-slim's batch_norm on this TensorFlow, whose TF1 batch norm looks for
tf-keras where tf-keras does not ship it: the suite supplies the path where
tf-keras is installed, and says in one line to install it where not."""

import subprocess
import sys

from conftest import REPO, SCRIPT_ENV

from verification import equivalence, equivalence_table

# A user's CIFAR-10 model with tf-slim's batch norm: [batch, 24, 24, 3] -> 10.
SLIM_MODEL = """
import tensorflow as tf
import tf_slim as slim


def net(images, is_training):
    x = slim.conv2d(images, 8, [3, 3], scope="conv1")
    x = slim.batch_norm(x, is_training=is_training, scope="bn1")
    x = tf.reduce_mean(x, [1, 2])
    return slim.fully_connected(x, 10, activation_fn=None, scope="logits")
"""


def test_a_slim_batch_norm_model_trains_on_two_towers_as_on_one_device(
    tmp_path, monkeypatch
):
    (tmp_path / "slim_models.py").write_text(SLIM_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    case = equivalence_table.Case(
        "replicated", "collective", "slim_models:net", "float32", 2
    )

    result, reference = equivalence.run_cell(case)

    assert equivalence_table.within(result), result
    assert (result.settled, result.hidden) == (True, None), result
    # Its statistics, and their averages, are compared.
    assert sorted(name for name in reference.values if "moving_" in name) == [
        "model/bn1/moving_mean",
        "model/bn1/moving_mean/ExponentialMovingAverage",
        "model/bn1/moving_variance",
        "model/bn1/moving_variance/ExponentialMovingAverage",
    ]


# Runs a script, argv[1], as if tf-keras were not installed.
WITHOUT_TF_KERAS = """
import runpy
import sys

sys.modules["tf_keras"] = None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_without_tf_keras_a_slim_batch_norm_model_says_to_install_it(
    tmp_path,
):
    (tmp_path / "slim_models.py").write_text(SLIM_MODEL)

    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_TF_KERAS, "cifar10_multi_gpu_train.py"]
        + ["--dry_run", "--model=slim_models:net"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(SCRIPT_ENV, PYTHONPATH=str(tmp_path)),
        cwd=REPO,
    )

    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "cifar10_multi_gpu_train.py: error: --model=slim_models:net calls "
        "TensorFlow's TF1 batch norm (tf-slim's batch_norm is built on it), "
        'which needs tf-keras: pip install ".[layers]" (tf-keras~=2.21.0)'
    )
