"""Flags that cannot work together or would be ignored: one line, at once.

Each script's flags are parsed by the script's own module in a subprocess
(absl defines a flag once per process), every command line of a table in
the same process, and `choices.check_flags` is asked for its verdict;
two scripts are run in full to read the exit code and the one line.
"""

import json

import pytest
from conftest import error_line
from helpers.scripts import run_code

from multigpu.flags import choices

# Parses each command line of stdin's JSON list with the script module's
# flags and prints, as JSON, what check_flags raised for each (None: OK).
_VERDICTS = """
import json, sys
from absl import flags
import {module} as script
from multigpu.distributed import cluster
from multigpu.flags import choices
verdicts = []
for argv in json.load(sys.stdin):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["{module}.py"] + argv)
    task = cluster.LOCAL_TASK
    if "ps_hosts" in flags.FLAGS:
        task = choices.cluster_task_from_flags(flags.FLAGS, environ={{}})
    try:
        choices.check_flags(flags.FLAGS, task)
        verdicts.append(None)
    except ValueError as e:
        verdicts.append(str(e))
print(json.dumps(verdicts))
"""

CLUSTER = ["--ps_hosts=127.0.0.1:2222", "--worker_hosts=127.0.0.1:2223"]
WORKERS_ONLY = "--worker_hosts=127.0.0.1:2223,127.0.0.1:2224"

# Why --dry_run and MNIST's --eval_only refuse a flag of training.
DRY_RUN_IGNORES = (
    "which builds the graph and prints its plan, with no session, no data "
    "and no file written, so it would be ignored; drop "
)
EVAL_ONLY_IGNORES = (
    "which scores the newest checkpoint of --train_dir on the test set, "
    "training nothing, so it would be ignored; drop "
)

# (script module, flags, the line check_flags gives, None when accepted).
CASES = [
    ("cifar10_train", ["--learning_rate=0.1"], None),
    ("cifar10_train", ["--learning_rate=0.1", "--momentum=0.9"], None),
    (
        "cifar10_train",
        ["--learning_rate=0.1", "--learning_rate_boundaries=5,2"],
        "--learning_rate_boundaries=5,2: expected steps in increasing "
        "order, found 2 after 5; e.g. --learning_rate_boundaries=2,5",
    ),
    (
        "cifar10_train",
        ["--learning_rate=0.1", "--learning_rate_boundaries=3,5,5"],
        "--learning_rate_boundaries=3,5,5 lists step 5 twice; list each "
        "step once (each divides the learning rate by 10)",
    ),
    (
        "cifar10_train",
        ["--learning_rate=0.1", "--learning_rate_boundaries=0,5"],
        "--learning_rate_boundaries=0,5: step 0 is no boundary, the rate "
        "starts at --learning_rate; expected steps from 1 on",
    ),
    (
        "cifar10_train",
        ["--momentum=0.9"],
        "--momentum=0.9 applies only with --learning_rate, which replaces "
        "the --model's own recipe; without it the model trains with its own "
        "recipe and --momentum would be ignored: add --learning_rate=RATE "
        "(per 128 examples per step) or drop --momentum",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--learning_rate_boundaries=100"],
        "--learning_rate_boundaries=100 applies only with --learning_rate, "
        "which replaces the --model's own recipe; without it the model "
        "trains with its own recipe and --learning_rate_boundaries would be "
        "ignored: add --learning_rate=RATE (per 128 examples per step) or "
        "drop --learning_rate_boundaries",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--all_reduce_spec=collective"],
        "--all_reduce_spec=collective applies only to --variable_update="
        "replicated, and this run is parameter_server, so it would be "
        "ignored; drop it or pass --variable_update=replicated",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--variable_update=replicated", "--variable_device=tower"],
        "--variable_device=tower applies only to --variable_update="
        "parameter_server, and this run is replicated, so it would be "
        "ignored; drop it or pass --variable_update=parameter_server",
    ),
    (
        "mnist_multi_gpu_train",
        ["--sync_replicas"],
        "--sync_replicas needs a cluster (--ps_hosts and --worker_hosts, or "
        "TF_CONFIG), and none is given: in one process the towers average "
        "their gradients every step; drop --sync_replicas",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--task_index=1"],
        "--task_index=1 needs a cluster (--ps_hosts and --worker_hosts, or "
        "TF_CONFIG), and none is given: in one process the towers average "
        "their gradients every step; drop --task_index",
    ),
    (
        "cifar10_multi_gpu_train",
        [*CLUSTER, "--job_name=worker", "--replicas_to_aggregate=2"],
        "--replicas_to_aggregate=2 applies only with --sync_replicas, which "
        "is not set, so it would be ignored; add --sync_replicas or drop "
        "--replicas_to_aggregate",
    ),
    (
        "mnist_multi_gpu_train",
        [*CLUSTER, "--job_name=ps", "--variable_update=replicated"],
        "--variable_update=replicated runs in a cluster of workers only, but "
        "--ps_hosts lists 1 ps task(s); drop --ps_hosts (and the ps tasks) "
        "or pass --variable_update=parameter_server",
    ),
    (
        "cifar10_multi_gpu_train",
        [WORKERS_ONLY, "--job_name=worker"],
        "--variable_update=parameter_server needs ps tasks, but the cluster "
        "has workers only (no --ps_hosts); pass --variable_update=replicated "
        "to all-reduce between the workers, or list ps tasks in --ps_hosts",
    ),
    (
        "mnist_multi_gpu_train",
        [
            WORKERS_ONLY,
            "--job_name=worker",
            "--variable_update=replicated",
            "--sync_replicas",
        ],
        "--sync_replicas is for the ps cluster; in a cluster of workers only "
        "every step all-reduces the gradients of all workers already: drop "
        "--sync_replicas",
    ),
    (
        "cifar10_multi_gpu_train",
        [WORKERS_ONLY, "--job_name=worker", "--variable_update=replicated"],
        None,
    ),
    (
        "cifar10_multi_gpu_train",
        [*CLUSTER, "--job_name=ps", "--variable_device=tower"],
        "--variable_device=tower does not apply in cluster mode: the "
        "variables live on the ps tasks; drop it",
    ),
    (
        "cifar10_multi_gpu_train",
        [*CLUSTER, "--job_name=worker", "--sync_replicas", "--use_fp16"],
        None,
    ),
    (
        "cifar10_train",
        ["--fp16_loss_scale=64"],
        "--fp16_loss_scale=64.0 applies only with --use_fp16, which is not "
        "set, so it would be ignored; add --use_fp16 or drop "
        "--fp16_loss_scale",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--force_cpu_bfloat16"],
        "--force_cpu_bfloat16 applies only with --use_fp16, which is not "
        "set, so it would be ignored; add --use_fp16 or drop "
        "--force_cpu_bfloat16",
    ),
    (
        "cifar10_train",
        ["--use_fp16", "--fp16_inc_loss_scale_every_n=10"],
        "--fp16_inc_loss_scale_every_n=10 applies only with "
        "--fp16_enable_auto_loss_scale, which is not set, so it would be "
        "ignored; add --fp16_enable_auto_loss_scale or drop "
        "--fp16_inc_loss_scale_every_n",
    ),
    (
        "mnist_multi_gpu_train",
        ["--fine_tune"],
        "--fine_tune applies only with --pretrained_model_checkpoint_path, "
        "which is not set, so it would be ignored; add "
        "--pretrained_model_checkpoint_path or drop --fine_tune",
    ),
    (
        "mnist_multi_gpu_train",
        ["--save_summaries_steps=5"],
        "--save_summaries_steps=5 applies only with --tb_logging, which is "
        "not set, so it would be ignored; add --tb_logging or drop "
        "--save_summaries_steps",
    ),
    ("mnist_multi_gpu_train", ["--learning_rate=0.5"], None),
    (
        "cifar10_multi_gpu_train",
        ["--gradient_pack_bytes=1024"],
        "--gradient_pack_bytes=1024 applies only in a cluster of workers "
        "(--worker_hosts or TF_CONFIG without ps tasks, "
        "--variable_update=replicated), whose workers all-reduce their "
        "gradients in pieces; this run has no cluster, so it would be "
        "ignored; drop --gradient_pack_bytes",
    ),
    (
        "mnist_multi_gpu_train",
        [*CLUSTER, "--job_name=worker", "--gradient_pack_bytes=0"],
        "--gradient_pack_bytes=0 applies only in a cluster of workers "
        "(--worker_hosts or TF_CONFIG without ps tasks, "
        "--variable_update=replicated), whose workers all-reduce their "
        "gradients in pieces; this run has ps tasks, so it would be "
        "ignored; drop --gradient_pack_bytes",
    ),
    (
        "cifar10_multi_gpu_train",
        [*CLUSTER, "--job_name=worker", "--gradient_transfer_dtype=float16"],
        "--gradient_transfer_dtype=float16 applies only in a cluster of "
        "workers (--worker_hosts or TF_CONFIG without ps tasks, "
        "--variable_update=replicated), whose workers all-reduce their "
        "gradients in that dtype; this run has ps tasks, so it would be "
        "ignored; drop --gradient_transfer_dtype",
    ),
    (
        "cifar10_multi_gpu_train",
        [
            WORKERS_ONLY,
            "--job_name=worker",
            "--variable_update=replicated",
            "--gradient_pack_bytes=1024",
            "--gradient_transfer_dtype=bfloat16",
        ],
        None,
    ),
    (
        "mnist_multi_gpu_train",
        [
            WORKERS_ONLY,
            "--job_name=worker",
            "--variable_update=replicated",
            "--all_reduce_spec=one_device",
        ],
        "--all_reduce_spec=one_device does not apply in a cluster of "
        "workers: every tower of every worker all-reduces its gradients by "
        "TensorFlow's collective ops; drop --all_reduce_spec",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--dry_run", "--max_steps=5"],
        "--max_steps=5 does not apply with --dry_run, "
        + DRY_RUN_IGNORES
        + "--max_steps (or --dry_run)",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--dry_run", "--fake_data"],
        "--fake_data does not apply with --dry_run, "
        + DRY_RUN_IGNORES
        + "--fake_data (or --dry_run)",
    ),
    (
        "cifar10_multi_gpu_train",
        ["--dry_run", "--num_gpus=8", "--use_fp16", "--train_dir=/tmp/t"],
        None,
    ),
    (
        "mnist_multi_gpu_train",
        ["--dry_run", "--profile_steps=3,3"],
        "--profile_steps=3,3 does not apply with --dry_run, "
        + DRY_RUN_IGNORES
        + "--profile_steps (or --dry_run)",
    ),
    (
        "mnist_multi_gpu_train",
        ["--eval_only", "--num_gpus=2"],
        "--num_gpus=2 does not apply with --eval_only, "
        + EVAL_ONLY_IGNORES
        + "--num_gpus (or --eval_only)",
    ),
    (
        "mnist_multi_gpu_train",
        ["--eval_only", "--learning_rate=0.5"],
        "--learning_rate=0.5 does not apply with --eval_only, "
        + EVAL_ONLY_IGNORES
        + "--learning_rate (or --eval_only)",
    ),
    (
        "mnist_multi_gpu_train",
        [*CLUSTER, "--job_name=worker", "--eval_only"],
        "--ps_hosts=127.0.0.1:2222 does not apply with --eval_only, "
        + EVAL_ONLY_IGNORES
        + "--ps_hosts (or --eval_only)",
    ),
    ("mnist_multi_gpu_train", ["--eval_only", "--batch_size=10"], None),
    (
        "cifar10_train",
        ["--fake_data", "--data_url=http://127.0.0.1:9/c.tar.gz"],
        "--data_url=http://127.0.0.1:9/c.tar.gz is where the data set is "
        "downloaded from, and --fake_data writes the built-in sample set "
        "instead, so it would be ignored; drop --data_url (or --fake_data)",
    ),
    (
        "cifar10_eval",
        ["--force_cpu_bfloat16"],
        "--force_cpu_bfloat16 applies only with --use_fp16, which is not "
        "set, so it would be ignored; add --use_fp16 or drop "
        "--force_cpu_bfloat16",
    ),
    ("cifar10_eval", ["--use_fp16", "--force_cpu_bfloat16"], None),
    (
        "cifar10_eval",
        ["--run_once", "--last_step=1000"],
        "--last_step=1000 ends a watch for new checkpoints, and --run_once "
        "scores one checkpoint and exits; drop one of them",
    ),
]


@pytest.fixture(scope="module")
def verdicts():
    """(module, flags) -> what check_flags says of them, one run a script."""
    found = {}
    for module in sorted({case[0] for case in CASES}):
        argvs = [flags for each, flags, _ in CASES if each == module]
        result = run_code(
            _VERDICTS.format(module=module), input=json.dumps(argvs)
        )
        assert result.returncode == 0, result.stderr[-3000:]
        for flags, verdict in zip(argvs, json.loads(result.stdout)):
            found[module, tuple(flags)] = verdict
    return found


@pytest.mark.parametrize(
    "module, flags, line", CASES, ids=[" ".join(c[1]) for c in CASES]
)
def test_each_combination_is_refused_in_one_line_or_accepted(
    verdicts, module, flags, line
):
    assert verdicts[module, tuple(flags)] == line


def test_increasing_boundaries_pass_and_others_name_the_first_fault():
    choices.check_boundaries([1, 32000, 48000])
    with pytest.raises(ValueError) as error:
        choices.check_boundaries([32000, 48000, 40000, 40000])
    assert str(error.value) == (
        "--learning_rate_boundaries=32000,48000,40000,40000: expected steps "
        "in increasing order, found 40000 after 48000; e.g. "
        "--learning_rate_boundaries=32000,40000,48000"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "script, flags, line",
    [
        (
            "cifar10_train.py",
            ["--learning_rate=0.1", "--learning_rate_boundaries=5,2"],
            "cifar10_train.py: error: --learning_rate_boundaries=5,2: "
            "expected steps in increasing order, found 2 after 5; e.g. "
            "--learning_rate_boundaries=2,5",
        ),
        (
            "cifar10_multi_gpu_train.py",
            [*CLUSTER, "--job_name=ps", "--variable_update=replicated"],
            "cifar10_multi_gpu_train.py: error: --variable_update=replicated"
            " runs in a cluster of workers only, but --ps_hosts lists 1 ps "
            "task(s); drop --ps_hosts (and the ps tasks) or pass "
            "--variable_update=parameter_server",
        ),
        (
            "cifar10_train.py",
            ["--use_fp16", "--force_cpu_bfloat16", "--fp16_loss_scale=64"],
            "cifar10_train.py: error: --fp16_loss_scale=64.0 applies only to "
            "float16 on GPUs, and this run computes in bfloat16 on the CPU "
            "(which needs no loss scaling), so it would be ignored; drop "
            "--fp16_loss_scale",
        ),
        (
            "cifar10_multi_gpu_train.py",
            [
                "--cpu_towers",
                "--use_fp16",
                "--force_cpu_bfloat16",
                "--fp16_enable_auto_loss_scale",
            ],
            "cifar10_multi_gpu_train.py: error: "
            "--fp16_enable_auto_loss_scale applies only to float16 on GPUs, "
            "and this run computes in bfloat16 on the CPU (which needs no "
            "loss scaling), so it would be ignored; drop "
            "--fp16_enable_auto_loss_scale",
        ),
        (
            # Past the checkpoints' int64 global step.
            "cifar10_train.py",
            ["--save_checkpoint_steps=%d" % 2**64],
            "cifar10_train.py: error: flag --save_checkpoint_steps=%d: %d "
            "is not an integer in the range [1, %d]"
            % (2**64, 2**64, 2**63 - 1),
        ),
        (
            "cifar10_multi_gpu_train.py",
            ["--max_steps=%d" % 2**63],
            "cifar10_multi_gpu_train.py: error: flag --max_steps=%d: %d is "
            "not an integer in the range [1, %d]" % (2**63, 2**63, 2**63 - 1),
        ),
    ],
    ids=[
        "boundaries",
        "ps_replicated",
        "bfloat16_scale",
        "bfloat16_auto",
        "save_steps_past_int64",
        "max_steps_past_int64",
    ],
)
def test_a_refused_combination_exits_1_before_anything_is_written(
    script, flags, line, tmp_path
):
    train_dir, data_dir = tmp_path / "train", tmp_path / "data"
    assert (
        error_line(
            script,
            "--train_dir=%s" % train_dir,
            "--data_dir=%s" % data_dir,
            "--fake_data",
            *flags,
        )
        == line
    )
    assert list(tmp_path.iterdir()) == []
