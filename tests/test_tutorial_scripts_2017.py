"""The tutorial's argparse-era scripts (Sept. 2017 to Jan. 2018) run on the
suite with every flag they were given honoured.

The scripts in tests/tutorial_scripts_2017/ are written in that era's
manner: `parser = cifar10.parser`, their own `parser.add_argument(...)`,
`FLAGS = parser.parse_args()` then `tf.app.run()` in `__main__`, booleans
`type=bool`. Each is copied into a user's folder and run from there.
"""

import pathlib

import pytest
import tensorflow as tf
from helpers.checkpoints import checkpoint_steps
from helpers.events import read_events
from helpers.scripts import run_code, run_user_script
from helpers.tutorial_checkpoints import top_1_hits

import cifar10

ERA_SCRIPTS = pathlib.Path(__file__).parent / "tutorial_scripts_2017"

# 40% of the 100 training records (5 files of 20) that the data fixture
# writes, as the tutorial's queue fills.
FILLING = "Filling queue with 40 CIFAR images before starting to train."


def run_era_script(folder, name, *flags):
    """Runs one of the era's scripts from folder; returns its stdout lines."""
    text = (ERA_SCRIPTS / name).read_text()
    return run_user_script(folder, name, text, *flags).stdout.splitlines()


def batch_of_logits(train_dir, step, name):
    """The static shape of a logits tensor in a checkpoint's meta graph."""
    with tf.Graph().as_default() as graph:
        meta = train_dir / ("model.ckpt-%d.meta" % step)
        tf.compat.v1.train.import_meta_graph(str(meta))
        return graph.get_tensor_by_name(name).shape.as_list()


@pytest.mark.slow
def test_the_argparse_era_trainer_and_eval_honour_every_flag_given(
    twenty_records_dir, tmp_path
):
    train_dir, eval_dir = tmp_path / "train", tmp_path / "eval"
    common = ["--data_dir=%s" % twenty_records_dir, "--batch_size=4"]
    trained = run_era_script(
        tmp_path,
        "cifar10_train.py",
        *common,
        "--train_dir=%s" % train_dir,
        "--max_steps=3",
        "--log_frequency=1",
    )
    assert trained[0] == FILLING
    assert [line.split(": ")[1].split(",")[0] for line in trained[1:]] == [
        "step 0",
        "step 1",
        "step 2",
    ]
    assert checkpoint_steps(train_dir) == [0, 3]
    # cifar10's calls read the --batch_size that the script's parser took.
    logits = "softmax_linear/MatMul:0"
    assert batch_of_logits(train_dir, 3, logits) == [4, 10]

    evaluated = run_era_script(
        tmp_path,
        "cifar10_eval.py",
        *common,
        "--checkpoint_dir=%s" % train_dir,
        "--eval_dir=%s" % eval_dir,
        "--num_examples=10",
        "--run_once=True",
    )
    # ceil(10 / 4) batches of 4 from the test file's 20 records.
    hits = top_1_hits(twenty_records_dir, train_dir, num_examples=12)
    assert evaluated[-1].split(": ", 1)[1] == "precision @ 1 = %.3f" % (
        hits / 12
    )
    [precision] = read_events(eval_dir).Scalars("Precision @ 1")
    assert (precision.step, precision.value) == (3, pytest.approx(hits / 12))


@pytest.mark.slow
def test_the_argparse_era_multi_gpu_trainer_trains_two_towers(
    twenty_records_dir, tmp_path
):
    train_dir = tmp_path / "train"
    lines = run_era_script(
        tmp_path,
        "cifar10_multi_gpu_train.py",
        "--data_dir=%s" % twenty_records_dir,
        "--batch_size=4",
        "--train_dir=%s" % train_dir,
        "--max_steps=3",
        "--num_gpus=2",
    )
    assert lines[0] == FILLING
    assert [line.split(": ")[1].split(",")[0] for line in lines[1:]] == [
        "step 0"
    ]
    # The era names its checkpoints by the loop's step, 0 to max_steps - 1.
    assert checkpoint_steps(train_dir) == [0, 2]
    checkpoint = tf.train.load_checkpoint(str(train_dir))
    assert checkpoint.get_tensor("global_step") == 3
    for tower in ("tower_0", "tower_1"):
        logits = "%s/softmax_linear/MatMul:0" % tower
        assert batch_of_logits(train_dir, 2, logits) == [4, 10]
    with pytest.raises(KeyError):
        batch_of_logits(train_dir, 2, "tower_2/softmax_linear/MatMul:0")


# A notebook's parse of the era: its own list, argparse's forms (a prefix,
# a boolean's value after a space), tf.app.run() never called.
PARSE_A_LIST = """
import sys

import tensorflow.compat.v1 as tf

import cifar10

parser = cifar10.parser
parser.add_argument("--train_dir", type=str, default="/tmp/cifar10_train")
FLAGS = parser.parse_args(["--batch", "4", "--use_fp16", "t"] + sys.argv[1:])
with tf.Graph().as_default():
    images, labels = cifar10.distorted_inputs()
print(images.dtype.name, images.shape.as_list(), labels.shape.as_list())
"""


def test_the_tutorial_calls_read_what_the_argparse_era_parser_parsed(
    twenty_records_dir,
):
    result = run_code(PARSE_A_LIST, "--data_dir=%s" % twenty_records_dir)
    assert result.stdout.splitlines()[-1] == "float16 [4, 24, 24, 3] [4]"


def test_a_bad_tutorial_flag_of_the_argparse_era_is_one_line():
    result = run_code(
        "import cifar10; cifar10.parser.parse_args()",
        "--batch_size=0",
    )
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        1,
        "-c: error: argument --batch_size: 0 is not >= 1",
    )
    assert "Traceback" not in result.stderr


def test_the_tutorial_calls_say_once_when_they_read_the_sample_set(
    cifar10_data_dir,
):
    # As our scripts do: the tutorial's scripts read --data_dir's default,
    # where the README's first command writes the sample set.
    result = run_code(
        "import tensorflow.compat.v1 as tf\n"
        "import cifar10\n"
        "cifar10.parser.parse_args()\n"
        "with tf.Graph().as_default():\n"
        "    cifar10.distorted_inputs()\n"
        "    cifar10.inputs(eval_data=True)\n",
        "--data_dir=%s" % cifar10_data_dir,
    )
    assert result.stdout.splitlines() == [
        "NOTE: %s/cifar-10-batches-bin holds the built-in sample set "
        "(generated by --fake_data), not CIFAR-10; its results say nothing "
        "about CIFAR-10" % cifar10_data_dir,
        # 40% of the sample set's 10,000 training records, the tutorial's.
        "Filling queue with 4000 CIFAR images before starting to train.",
    ]


@pytest.mark.parametrize(
    "given, use_fp16",
    [([], False), (["--use_fp16"], True), (["--use_fp16", "f"], False)],
)
def test_the_argparse_era_reads_a_bare_use_fp16_as_true_and_f_as_false(
    given, use_fp16, monkeypatch
):
    # The parser keeps what it parsed last: none of it outlives the test.
    monkeypatch.setattr(cifar10.parser, "values", None)

    assert cifar10.parser.parse_args(given).use_fp16 is use_fp16
