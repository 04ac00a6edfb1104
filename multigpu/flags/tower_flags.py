"""The flags of the multi-tower trainers, defined once, as `common_flags`'
key flags, which the trainers adopt for their `--help`."""

from absl import flags

from multigpu.flags import common_flags
from multigpu.graph import (
    all_reduce,
    collectives,
    placement,
    towers,
    variable_update,
)


def define_multi_tower_flags():
    common_flags.define_once(
        flags.DEFINE_integer,
        "num_gpus",
        1,
        "Number of towers, one per GPU. With the default 1 and no GPU "
        "visible, the tower runs on the CPU; more towers than visible GPUs "
        "need --cpu_towers.",
        lower_bound=1,
    )
    common_flags.define_once(
        flags.DEFINE_boolean,
        "cpu_towers",
        False,
        "When fewer than --num_gpus GPUs are visible, run each tower on its "
        "own virtual CPU device instead of stopping with an error.",
    )
    _define_variable_update_flags()
    _define_cluster_flags()
    common_flags.define_once(
        flags.DEFINE_boolean,
        "dry_run",
        False,
        "Build the graph for --num_gpus GPUs, visible or not, open no "
        "session and print the placement plan: ops and parameters per "
        "device, the bytes crossing devices per step, and any op placed on "
        "a GPU without a GPU kernel for its dtypes in this TensorFlow build "
        "(exit 1 if one is found). Needs no data: a flag only training "
        "uses (--fake_data, --profile_steps, --save_checkpoint_steps, ...) is "
        "refused.",
    )


def _define_cluster_flags():
    common_flags.define_once(
        flags.DEFINE_string,
        "ps_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the ps tasks. Without "
        "--ps_hosts and --worker_hosts the cluster comes from the TF_CONFIG "
        "environment variable when it names one (Kubeflow TFJob, "
        "tf.distribute): its chief is worker 0 and its worker i is worker "
        "i+1. Flags and TF_CONFIG that disagree are an error. Each task's "
        "gRPC server listens on PORT of all interfaces, whatever HOST says, "
        "with no authentication: whoever reaches it can run any graph as "
        "you (read and write your files); run the cluster behind a firewall "
        "or on a private network.",
    )
    common_flags.define_once(
        flags.DEFINE_string,
        "worker_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the worker tasks; worker "
        "0 is the chief (initialises, checkpoints, writes summaries).",
    )
    common_flags.define_once(
        flags.DEFINE_string, "job_name", "", "Cluster mode: 'ps' or 'worker'."
    )
    common_flags.define_once(
        flags.DEFINE_integer,
        "task_index",
        0,
        "Cluster mode: index within the job.",
    )
    common_flags.define_once(
        flags.DEFINE_boolean,
        "sync_replicas",
        False,
        "Cluster mode: every step averages the gradients of the workers "
        "(SyncReplicasOptimizer) instead of each worker updating on its own.",
    )
    common_flags.define_once(
        flags.DEFINE_integer,
        "replicas_to_aggregate",
        0,
        "Cluster mode with --sync_replicas: gradients per step; 0 = one per "
        "worker.",
        lower_bound=0,
    )
    common_flags.define_once(
        flags.DEFINE_integer,
        "operation_timeout_secs",
        120,
        "Cluster mode only: a task ends in one line this long after a peer "
        "is lost, or after its start if its peers have not all started and "
        "agreed on the settings (docs/cluster.md); 0 waits forever.",
        lower_bound=0,
    )


def _define_variable_update_flags():
    common_flags.define_once(
        flags.DEFINE_enum,
        "variable_update",
        "parameter_server",
        list(variable_update.VARIABLE_UPDATES),
        "parameter_server (the TF1 design): one copy of the variables on "
        "one device (the CPU by default), each tower reads it and sends its "
        "gradients there. replicated: a copy on every tower's device, the "
        "gradients all-reduced between the towers (--all_reduce_spec) and "
        "each copy updated alike; checkpoints hold one copy under the usual "
        "names. Cluster mode: parameter_server needs ps tasks (--ps_hosts); "
        "replicated runs in a cluster of workers only (--worker_hosts, no "
        "--ps_hosts), every tower of every worker a copy, the gradients "
        "all-reduced between all of them by TensorFlow's collective ops: "
        "the choice once the ps links limit the step.",
    )
    common_flags.define_once(
        flags.DEFINE_enum,
        "all_reduce_spec",
        "auto",
        list(all_reduce.ALL_REDUCE_CHOICES),
        "The all-reduce of --variable_update=replicated: nccl (NCCL, GPUs "
        "only), collective (TensorFlow's collective ops, ring, on CPUs or "
        "GPUs) or one_device (summed on the first tower's device, for "
        "comparison); auto is nccl on GPUs, collective on CPU towers.",
    )
    common_flags.define_once(
        flags.DEFINE_integer,
        "gradient_pack_bytes",
        collectives.PACK_BYTES_DEFAULT,
        "Cluster of workers only: the gradients are concatenated and "
        "all-reduced between the workers in pieces of about this many "
        "bytes (fewer, larger messages); 0 all-reduces each gradient by "
        "itself.",
        lower_bound=0,
    )
    common_flags.define_once(
        flags.DEFINE_enum,
        "gradient_transfer_dtype",
        "float32",
        ["float32", "float16", "bfloat16"],
        "Cluster of workers only: the dtype the float32 gradients cross "
        "the workers in. float16 or bfloat16 halves the bytes on the "
        "network (tf_cnn_benchmarks' compact gradient transfer); the "
        "ring sums in that dtype, and the mean comes back as float32.",
    )


def define_device_flags():
    common_flags.define_once(
        flags.DEFINE_enum,
        "variable_device",
        "cpu",
        list(placement.VARIABLE_DEVICE_CHOICES),
        "Where the variables live and the towers' gradients are averaged: "
        "'cpu' (the TF1 design, /cpu:0) or 'tower' (alias 'gpu': the first "
        "tower's device, e.g. /gpu:0, for GPUs linked peer to peer). With "
        "--cpu_towers the first tower is /cpu:0, so both are the same. Not "
        "in cluster mode, where the variables live on the ps tasks.",
    )
    common_flags.define_once(
        flags.DEFINE_boolean,
        "xla",
        False,
        "Compile each tower (forward and backward) with XLA, through "
        "tf.xla.experimental.jit_scope (no TF_XLA_FLAGS needed). Meant for "
        "GPUs: on a CPU the step is the same but slower.",
    )
    common_flags.define_once(
        flags.DEFINE_boolean,
        "prefetch_to_device",
        towers.PREFETCH_TO_DEVICE_DEFAULT,
        "Stage each tower's next batch on its device while the current step "
        "computes (a StagingArea per tower), so that the input copy overlaps "
        "the compute; --noprefetch_to_device reads the batch in the step.",
    )
