"""--dry_run: the graph for N GPUs, its transfers and kernels, without GPUs."""

import re
import subprocess
import sys

import pytest
import tensorflow as tf
from conftest import (
    REPO,
    SCRIPT_ENV,
    bfloat16_conv_graph,
    remapper_fuses_bfloat16,
    run_script,
)
from helpers.model_sizes import (
    CIFAR10_PARAMETERS,
    FLOAT32_BYTES,
    INT32_BYTES,
    cifar10_batch_bytes,
)
from helpers.scripts import run_code

# The trainers' graph builders (their flags are defined once per process;
# the scripts themselves run as subprocesses below).
import cifar10_multi_gpu_train
import mnist_model
from multigpu.distributed import cluster
from multigpu.graph import (
    dry_run,
    op_kernels,
    placement,
    step_optimizer,
    variable_update,
)

# The MNIST model's parameters, layer by layer.
MNIST_PARAMETERS = (
    (5 * 5 * 1 * 32 + 32)  # conv1
    + (5 * 5 * 32 * 64 + 64)  # conv2
    + (7 * 7 * 64 * 1024 + 1024)  # local3
    + (1024 * 10 + 10)  # local4
    + (10 * 10 + 10)  # softmax_linear
)
BATCH = 8


def mnist_batch_bytes(batch):
    return batch * 784 * FLOAT32_BYTES + batch * INT32_BYTES


def test_the_models_have_the_parameter_counts_of_their_layers():
    assert CIFAR10_PARAMETERS == 1068298
    assert MNIST_PARAMETERS == 3274744


def cifar10_batch_shapes(batch):
    return [([batch, 24, 24, 3], tf.float32), ([batch], tf.int32)]


def cifar10_plan(
    num_gpus,
    variable_device="cpu",
    task=cluster.LOCAL_TASK,
    *,
    compute_dtype,
    prefetch=False,
    xla=False,
):
    devices = dry_run.gpu_devices(num_gpus)
    with tf.Graph().as_default() as graph:
        with tf.compat.v1.device(cluster.device_setter(task)):
            cifar10_multi_gpu_train.build_graph(
                inputs=cifar10_multi_gpu_train.TowerInput(
                    dry_run.synthetic_batches(cifar10_batch_shapes(BATCH)),
                    BATCH,
                    prefetch,
                ),
                update=variable_update.variable_update(
                    "parameter_server",
                    devices,
                    variable_device,
                    task.kind.places_variables,
                ),
                dtypes=step_optimizer.Dtypes(compute_dtype, None),
                task=task,
                options=cifar10_multi_gpu_train.StepOptions(xla=xla),
            )
    return graph


@pytest.mark.parametrize(
    "num_gpus, options",
    [
        (1, dict(compute_dtype=tf.float32)),
        (2, dict(compute_dtype=tf.float32, prefetch=True)),
        (8, dict(compute_dtype=tf.float16, xla=True, prefetch=True)),
    ],
)
def test_each_cifar10_tower_moves_its_variables_gradients_and_batch(
    num_gpus, options
):
    graph = cifar10_plan(num_gpus, **options)

    plan = dry_run.transfer_plan(graph, cifar10_batch_shapes(BATCH))

    parameter_bytes = CIFAR10_PARAMETERS * FLOAT32_BYTES
    assert [tuple(t[1:]) for t in plan] == num_gpus * [
        (parameter_bytes, parameter_bytes, cifar10_batch_bytes(BATCH))
    ]
    assert [t.device for t in plan] == [
        "/device:GPU:%d" % i for i in range(num_gpus)
    ]
    assert dry_run.ops_without_gpu_kernel(graph) == []


def test_with_variables_on_the_first_tower_tower_0_reads_them_locally():
    graph = cifar10_plan(3, "tower", compute_dtype=tf.float16)

    plan = dry_run.transfer_plan(graph, cifar10_batch_shapes(BATCH))

    parameter_bytes = CIFAR10_PARAMETERS * FLOAT32_BYTES
    assert plan[0][1:] == (0, 0, cifar10_batch_bytes(BATCH))
    assert [tuple(t[1:]) for t in plan[1:]] == 2 * [
        (parameter_bytes, parameter_bytes, cifar10_batch_bytes(BATCH))
    ]


def test_a_cluster_worker_reads_every_variable_from_the_ps_tasks():
    task = cluster.cluster_task(
        "127.0.0.1:1,127.0.0.1:2", "127.0.0.1:3,127.0.0.1:4", "worker", 1
    )

    graph = cifar10_plan(2, task=task, compute_dtype=tf.float32)

    plan = dry_run.transfer_plan(graph, cifar10_batch_shapes(BATCH))
    parameter_bytes = CIFAR10_PARAMETERS * FLOAT32_BYTES
    assert [tuple(t[1:]) for t in plan] == 2 * [
        (parameter_bytes, parameter_bytes, cifar10_batch_bytes(BATCH))
    ]
    assert plan[1].device == "/job:worker/task:1/device:GPU:1"


@pytest.mark.parametrize("num_gpus", [1, 2, 8])
def test_each_mnist_tower_moves_its_variables_gradients_and_batch(num_gpus):
    batch_shapes = [([BATCH, 784], tf.float32), ([BATCH], tf.int32)]
    with tf.Graph().as_default() as graph:
        mnist_model.train(
            dry_run.synthetic_batches(batch_shapes),
            dry_run.gpu_devices(num_gpus),
            0.01,
        )

    plan = dry_run.transfer_plan(graph, batch_shapes)

    parameter_bytes = MNIST_PARAMETERS * FLOAT32_BYTES
    assert [tuple(t[1:]) for t in plan] == num_gpus * [
        (parameter_bytes, parameter_bytes, mnist_batch_bytes(BATCH))
    ]
    assert dry_run.ops_without_gpu_kernel(graph) == []


def test_an_op_without_a_gpu_kernel_for_its_dtype_is_named():
    with tf.Graph().as_default() as graph:
        with tf.device("/gpu:0"):
            # The GPU kernel of LRN takes float32 only.
            tf.nn.local_response_normalization(
                tf.zeros([1, 4, 4, 8], tf.float16), name="norm"
            )
            tf.nn.local_response_normalization(
                tf.zeros([1, 4, 4, 8], tf.float32), name="norm32"
            )

    assert dry_run.ops_without_gpu_kernel(graph) == [
        "norm (LRN, T=float16) on /device:GPU:0"
    ]


def _dry_run_totals(stdout):
    towers = re.findall(
        r"tower \d+ on \S+: ([\d,]+) \+ ([\d,]+) \+ ([\d,]+) bytes", stdout
    )
    total = re.search(r"total: ([\d,]+) bytes per step", stdout)
    assert towers and total, stdout
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    return [tuple(map(number, t)) for t in towers], number(total[1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, options, batch_bytes, parameters",
    [
        (
            "cifar10_multi_gpu_train.py",
            ("--use_fp16", "--fp16_enable_auto_loss_scale", "--xla"),
            cifar10_batch_bytes,
            CIFAR10_PARAMETERS,
        ),
        ("mnist_multi_gpu_train.py", (), mnist_batch_bytes, MNIST_PARAMETERS),
    ],
)
def test_the_dry_run_for_8_gpus_prints_the_bytes_of_the_models_parameters(
    script, options, batch_bytes, parameters, tmp_path
):
    result = run_script(
        script,
        "--dry_run",
        "--num_gpus=8",
        "--batch_size=%d" % BATCH,
        "--train_dir=%s" % tmp_path,
        *options,
    )

    towers, total = _dry_run_totals(result.stdout)
    per_tower = (
        parameters * FLOAT32_BYTES,
        parameters * FLOAT32_BYTES,
        batch_bytes(BATCH),
    )
    assert towers == 8 * [per_tower]
    assert total == 8 * sum(per_tower)
    assert "GPU ops without a GPU kernel in this TensorFlow build: none" in (
        result.stdout
    )
    # Nothing was trained or written.
    assert not tmp_path.joinpath("checkpoint").exists()
    if options:
        assert (
            "  compute_dtype: float16\n"
            "  variable_update: parameter_server\n"
            "  variable_device: /cpu:0\n"
            "  xla: True\n"
            "  prefetch_to_device: True\n"
            "  cluster_task: none\n"
            "  loss_scaling: dynamic from 128, x2 after 1000 good steps\n"
            in result.stdout
        )


# Runs cifar10_multi_gpu_train.py with LRN computing in the compute dtype,
# as if the model did not cast it to float32.
_PLANT_LRN = """
import sys
import tensorflow as tf
import cifar10
import cifar10_multi_gpu_train as script

def lrn_in_compute_dtype(x, name):
    return tf.nn.local_response_normalization(x, name=name)

cifar10._lrn = lrn_in_compute_dtype
sys.argv[0] = "cifar10_multi_gpu_train.py"
script.run()
"""


@pytest.mark.slow
def test_a_float16_op_without_a_gpu_kernel_fails_the_dry_run_with_its_name():
    result = run_code(
        _PLANT_LRN,
        "--dry_run",
        "--num_gpus=2",
        "--use_fp16",
        "--batch_size=%d" % BATCH,
    )

    assert result.returncode == 1, result.stderr[-3000:]
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "cifar10_multi_gpu_train.py: error: dry run: 8 op(s) placed on a GPU "
        "have no GPU kernel for their dtypes in this TensorFlow build and "
        "would fall back to the CPU, copying their tensors every step: "
        "towers/tower_0/norm1 (LRN, T=float16) on /device:GPU:0; "
    ), error
    assert (
        "towers/tower_1/gradients/towers/tower_1/norm1_grad/LRNGrad "
        "(LRNGrad, T=float16) "
        "on /device:GPU:1" in error
    )


def test_the_audit_names_a_fused_op_that_a_cluster_worker_could_not_run():
    graph = bfloat16_conv_graph("/job:worker/task:0/cpu:0")
    fused = op_kernels.unrunnable_rewrites(
        graph, placement.session_config(), op_kernels.has_gpu_kernel
    )
    # Where the remapper leaves the ops apart, nothing is fused to name.
    named = []
    if remapper_fuses_bfloat16():
        named = [
            "Relu (_FusedConv2D, T=bfloat16) on /job:worker/task:0/device:"
            "CPU:0: the op _FusedConv2D allows no bfloat16 for T"
        ]
    assert fused == named
    unfused = placement.session_config(fuse_ops=False)
    assert (
        op_kernels.unrunnable_rewrites(
            graph, unfused, op_kernels.has_gpu_kernel
        )
        == []
    )


def test_a_dry_run_whose_reader_leaves_ends_quietly_with_sigpipes_code():
    # As `--dry_run | head`, whose reader is gone before the first line.
    process = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "cifar10_multi_gpu_train.py"),
            "--dry_run",
            "--num_gpus=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=SCRIPT_ENV,
        cwd=REPO,
    )
    process.stdout.close()
    stderr = process.stderr.read()
    # 128 + SIGPIPE, the shell's code of a tool that stops at a closed pipe.
    assert (process.wait(300), stderr) == (141, "")
