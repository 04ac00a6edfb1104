"""Flags that several trainers share, defined once."""

from absl import flags

from multigpu import loss_scale, placement, towers


def define_cluster_flags():
    """Defines the cluster-mode flags of a trainer; call it at its top.

    The flags are written once here for both multi-GPU trainers: the
    trainer's `main` passes them to `cluster.cluster_task_from_flags`.
    """
    flags.DEFINE_string(
        "ps_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the ps tasks. Without "
        "--ps_hosts and --worker_hosts the cluster comes from the TF_CONFIG "
        "environment variable when it names one (Kubeflow TFJob, "
        "tf.distribute): its chief is worker 0 and its worker i is worker "
        "i+1. Flags and TF_CONFIG that disagree are an error.",
    )
    flags.DEFINE_string(
        "worker_hosts",
        "",
        "Cluster mode: comma-separated HOST:PORT of the worker tasks; worker "
        "0 is the chief (initialises, checkpoints, writes summaries).",
    )
    flags.DEFINE_string("job_name", "", "Cluster mode: 'ps' or 'worker'.")
    flags.DEFINE_integer("task_index", 0, "Cluster mode: index within the job.")
    flags.DEFINE_boolean(
        "sync_replicas",
        False,
        "Cluster mode: every step averages the gradients of the workers "
        "(SyncReplicasOptimizer) instead of each worker updating on its own.",
    )
    flags.DEFINE_integer(
        "replicas_to_aggregate",
        0,
        "Cluster mode with --sync_replicas: gradients per step; 0 = one per "
        "worker.",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "operation_timeout_secs",
        120,
        "Cluster mode: an operation waiting longer than this (e.g. on a dead "
        "peer) ends the run with an error; 0 waits forever.",
        lower_bound=0,
    )


def define_device_flags():
    """Defines a multi-tower trainer's device and speed flags.

    --variable_device, --xla and --prefetch_to_device, written once for the
    multi-GPU trainers: the trainer's `main` reads them and passes them to
    `placement.variable_device`, `towers.build_towers` and
    `towers.stage_on_device`.
    """
    flags.DEFINE_enum(
        "variable_device",
        "cpu",
        list(placement.VARIABLE_DEVICE_CHOICES),
        "Where the variables live and the towers' gradients are averaged: "
        "'cpu' (the TF1 design, /cpu:0) or 'tower' (alias 'gpu': the first "
        "tower's device, e.g. /gpu:0, for GPUs linked peer to peer). With "
        "--cpu_towers the first tower is /cpu:0, so both are the same. Not "
        "in cluster mode, where the variables live on the ps tasks.",
    )
    flags.DEFINE_boolean(
        "xla",
        False,
        "Compile each tower (forward and backward) with XLA, through "
        "tf.xla.experimental.jit_scope (no TF_XLA_FLAGS needed). Meant for "
        "GPUs: on a CPU the step is the same but slower.",
    )
    flags.DEFINE_boolean(
        "prefetch_to_device",
        towers.PREFETCH_TO_DEVICE_DEFAULT,
        "Stage each tower's next batch on its device while the current step "
        "computes (a StagingArea per tower), so that the input copy overlaps "
        "the compute; --noprefetch_to_device reads the batch in the step.",
    )


def define_session_flags():
    """Defines the session options of the TF1 notes, for every script.

    The script's `main` passes `session_options_from_flags(FLAGS)` to
    `placement.session_config`.
    """
    flags.DEFINE_boolean(
        "allow_growth",
        False,
        "Take GPU memory as it is needed instead of (almost) all of it at "
        "start (gpu_options.allow_growth), e.g. to share a GPU.",
    )
    flags.DEFINE_float(
        "gpu_memory_fraction",
        0.0,
        "Share of each GPU's memory this process may take "
        "(gpu_options.per_process_gpu_memory_fraction); 0 = TensorFlow's "
        "default.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    flags.DEFINE_integer(
        "num_intra_threads",
        0,
        "Threads that one op may use (intra_op_parallelism_threads); 0 = "
        "TensorFlow's choice (the CPU cores).",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "num_inter_threads",
        0,
        "Ops that may run at once (inter_op_parallelism_threads); 0 = "
        "TensorFlow's choice.",
        lower_bound=0,
    )


def session_options_from_flags(flag_values):
    """The `placement.SessionOptions` of `define_session_flags`' flags.

    Args:
      flag_values: the parsed flags, the script's `FLAGS`, passed by `main`.
    """
    return placement.SessionOptions(
        flag_values.allow_growth,
        flag_values.gpu_memory_fraction,
        flag_values.num_intra_threads,
        flag_values.num_inter_threads,
    )


def define_dry_run_flag():
    """Defines --dry_run of a multi-tower trainer (see `multigpu.dry_run`)."""
    flags.DEFINE_boolean(
        "dry_run",
        False,
        "Build the graph for --num_gpus GPUs, visible or not, open no "
        "session and print the placement plan: ops and parameters per "
        "device, the bytes crossing devices per step, and any op placed on "
        "a GPU without a GPU kernel for its dtypes in this TensorFlow build "
        "(exit 1 if one is found). Needs no data.",
    )


def define_trace_flag():
    """Defines --trace_step of a trainer (see `multigpu.trace`)."""
    flags.DEFINE_integer(
        "trace_step",
        0,
        "Trace the step that reaches this global step: write a Chrome trace "
        "(TRAIN_DIR/trace_step_N.json, for chrome://tracing or Perfetto) and "
        "its run metadata for TensorBoard's graph view; 0 traces nothing.",
        lower_bound=0,
    )


def define_fp16_flags():
    """Defines the reduced-precision flags of a trainer with --use_fp16.

    The trainer's `main` passes --force_cpu_bfloat16 to
    `placement.compute_dtype` and `loss_scaling_from_flags(FLAGS, ...)` to
    its graph.
    """
    flags.DEFINE_boolean(
        "force_cpu_bfloat16",
        False,
        "With --use_fp16 on a CPU without bfloat16 instructions (AVX512_BF16 "
        "or AMX), compute in bfloat16 anyway (emulated, about 10x slower) "
        "instead of float32.",
    )
    flags.DEFINE_float(
        "fp16_loss_scale",
        loss_scale.DEFAULT_LOSS_SCALE,
        "With --use_fp16 on GPUs (float16): multiply the loss by this before "
        "the gradients are computed and divide the gradients by it, so that "
        "small gradients do not underflow; 1 disables it. The starting "
        "scale of --fp16_enable_auto_loss_scale.",
    )
    flags.DEFINE_boolean(
        "fp16_enable_auto_loss_scale",
        False,
        "With --use_fp16 on GPUs: a dynamic loss scale that skips the update "
        "and halves on non-finite gradients and doubles after "
        "--fp16_inc_loss_scale_every_n good steps in a row.",
    )
    flags.DEFINE_integer(
        "fp16_inc_loss_scale_every_n",
        loss_scale.DEFAULT_INC_EVERY_N,
        "Good steps in a row before the dynamic loss scale doubles.",
        lower_bound=1,
    )


def loss_scaling_from_flags(flag_values, compute_dtype, sync_replicas=False):
    """The `loss_scale.LossScaling` of `define_fp16_flags`' flags, or None.

    Args:
      flag_values: the parsed flags, the trainer's `FLAGS`.
      compute_dtype: the towers' compute dtype; only float16 is scaled.
      sync_replicas: bool, the cluster's --sync_replicas.
    """
    return loss_scale.loss_scaling(
        compute_dtype,
        flag_values.fp16_loss_scale,
        flag_values.fp16_enable_auto_loss_scale,
        flag_values.fp16_inc_loss_scale_every_n,
        sync_replicas,
    )
