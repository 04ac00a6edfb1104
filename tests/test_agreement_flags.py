"""Which flags the workers of a cluster compare before step 1.

Every flag a trainer defines is compared but LOCAL_FLAGS, which a worker
may set on its own (docs/cluster.md): its folders, its output, its place in
the cluster, its session's resources and what only the chief acts on. Both
lists are stated here: a flag moved from one to the other, or a new flag
left out of both, fails.
"""

import json
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPT_ENV

from multigpu.flags import choices

# The flags a worker may set on its own: none changes the numbers.
LOCAL = [
    "allow_growth",
    "clear_train_dir",
    "cpu_towers",
    "data_dir",
    "data_url",
    "dry_run",
    "eval_only",
    "fine_tune",
    "gpu_memory_fraction",
    "job_name",
    "log_device_placement",
    "log_frequency",
    "num_inter_threads",
    "num_intra_threads",
    "operation_timeout_secs",
    "prefetch_to_device",
    "pretrained_model_checkpoint_path",
    "profile_steps",
    "ps_hosts",
    "save_checkpoint_steps",
    "save_summaries_steps",
    "task_index",
    "tb_logging",
    "trace_step",
    "train_dir",
    "worker_hosts",
]
# Each trainer's flags that change the numbers: every worker's must match.
COMPARED = {
    "cifar10_multi_gpu_train": [
        "all_reduce_spec",
        "batch_size",
        "clip_gradients",
        "fake_data",
        "force_cpu_bfloat16",
        "fp16_enable_auto_loss_scale",
        "fp16_inc_loss_scale_every_n",
        "fp16_loss_scale",
        "gradient_pack_bytes",
        "gradient_transfer_dtype",
        "learning_rate",
        "learning_rate_boundaries",
        "max_steps",
        "model",
        "momentum",
        "num_gpus",
        "replicas_to_aggregate",
        "sync_replicas",
        "use_fp16",
        "variable_device",
        "variable_update",
        "xla",
    ],
    "mnist_multi_gpu_train": [
        "all_reduce_spec",
        "batch_size",
        "fake_data",
        "gradient_pack_bytes",
        "gradient_transfer_dtype",
        "learning_rate",
        "num_epochs",
        "num_gpus",
        "replicas_to_aggregate",
        "sync_replicas",
        "variable_update",
    ],
}
# A trainer's settings as its workers compare them, and every flag it
# defines (absl's and TensorFlow's own left out), as JSON.
SETTINGS_AND_FLAGS = """
import importlib, json, sys
from multigpu.flags import choices
script = importlib.import_module(sys.argv[1])
defined = [
    flag.name
    for module, flags in script.FLAGS.flags_by_module_dict().items()
    if not module.startswith(("absl", "tensorflow"))
    for flag in flags
]
print(json.dumps([sorted(choices.cluster_settings(script.FLAGS)),
                  sorted(defined)]))
"""


def test_the_flags_a_worker_may_set_on_its_own_are_exactly_these():
    assert sorted(choices.LOCAL_FLAGS) == LOCAL


@pytest.mark.parametrize("script", sorted(COMPARED))
def test_the_workers_compare_every_other_flag_of_a_trainer(script):
    run = subprocess.run(
        [sys.executable, "-c", SETTINGS_AND_FLAGS, script],
        capture_output=True,
        text=True,
        timeout=120,
        env=SCRIPT_ENV,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    compared, defined = json.loads(run.stdout)
    assert compared == COMPARED[script]
    # Every flag the trainer defines is in one list or the other.
    assert sorted(set(defined) - set(LOCAL)) == compared
