"""Where the towers run and where the variables live; the session config."""

import collections
import sys

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

# Where the variables live and the gradients are averaged (the TF1 design),
# unless --variable_device=tower (see `variable_device`).
VARIABLE_DEVICE = "/cpu:0"


# The --variable_device choices: 'cpu' keeps VARIABLE_DEVICE; 'tower' (or its
# alias 'gpu', tf_cnn_benchmarks' word) uses the first tower's device.
VARIABLE_DEVICE_CHOICES = ("cpu", "tower", "gpu")


def tower_devices(num_gpus, cpu_towers):
    """'/gpu:i' when enough GPUs are visible, else '/cpu:i' (one virtual
    CPU device per tower, with cpu_towers). One tower with no GPU runs on the
    CPU, so the defaults run anywhere.
    """
    if num_gpus < 1:
        raise ValueError("--num_gpus must be at least 1, got %d" % num_gpus)
    visible = len(tf.config.list_physical_devices("GPU"))
    if num_gpus <= visible:
        return ["/gpu:%d" % i for i in range(num_gpus)]
    if num_gpus > 1 and not cpu_towers:
        raise ValueError(
            "--num_gpus=%d but %d GPU(s) are visible; pass --cpu_towers to run "
            "the towers on virtual CPU devices" % (num_gpus, visible)
        )
    return ["/cpu:%d" % i for i in range(num_gpus)]


def variable_device(choice, devices, places_variables=True):
    """Where the variables live and the towers' gradients are averaged:
    'tower' pays off when the GPUs talk to each other faster than to the host.
    places_variables: False where the device setter puts the variables on
    the ps tasks.
    """
    if choice not in VARIABLE_DEVICE_CHOICES:
        raise ValueError(
            "--variable_device must be one of %s, got %r"
            % (", ".join(VARIABLE_DEVICE_CHOICES), choice)
        )
    if choice == "cpu":
        return VARIABLE_DEVICE
    if not places_variables:
        raise ValueError(
            "--variable_device=%s does not apply in cluster mode: the "
            "variables live on the ps tasks" % choice
        )
    return devices[0]


# The op types that hold a variable: those TensorFlow's replica_device_setter
# sends to the ps (its STANDARD_PS_OPS), resource and reference variables.
VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable", "AutoReloadVariable")


def device_function(tower_device, variable_device):
    """The one device function of a tower: every op that holds a
    variable goes to variable_device, whatever made it (the answer to "layers
    created on the CPU but executed on the GPU"); any other keeps a device
    set inside the tower or runs on tower_device.
    """
    variable_device = tf.DeviceSpec.from_string(variable_device).to_string()
    tower_device = tf.DeviceSpec.from_string(tower_device).to_string()

    def choose(op):
        if op.type in VARIABLE_OPS:
            return variable_device
        return op.device or tower_device

    return choose


def describe_devices(devices):
    if devices == ["/cpu:0"]:
        return "No GPU visible: the one tower runs on the CPU (/cpu:0)"
    if devices[0].startswith("/cpu"):
        return "No GPU used: %d tower(s) on virtual CPU devices %s" % (
            len(devices),
            ", ".join(devices),
        )
    return "%d tower(s) on %s" % (len(devices), ", ".join(devices))


class SessionOptions(
    collections.namedtuple(
        "SessionOptions",
        "allow_growth gpu_memory_fraction num_intra_threads num_inter_threads",
    )
):
    """The session options of the TF1 notes (0 = TensorFlow's choice)."""


# TensorFlow's own defaults for each session option.
DEFAULT_SESSION_OPTIONS = SessionOptions(False, 0.0, 0, 0)


def session_config(
    devices=("/cpu:0",),
    log_device_placement=False,
    operation_timeout_secs=0,
    options=DEFAULT_SESSION_OPTIONS,
    fuse_ops=True,
):
    """The `ConfigProto` of every session of the suite: soft placement
    lets ops without a GPU kernel fall back to the CPU; one CPU device per
    CPU tower makes them separate devices as GPU towers are.
    """
    num_cpu_devices = max(1, sum(d.startswith("/cpu") for d in devices))
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=log_device_placement,
        device_count={"CPU": num_cpu_devices},
        operation_timeout_in_ms=operation_timeout_secs * 1000,
        gpu_options=tf.compat.v1.GPUOptions(
            allow_growth=options.allow_growth,
            per_process_gpu_memory_fraction=options.gpu_memory_fraction,
        ),
        intra_op_parallelism_threads=options.num_intra_threads,
        inter_op_parallelism_threads=options.num_inter_threads,
    )
    if not fuse_ops:
        config.graph_options.rewrite_options.remapping = (
            rewriter_config_pb2.RewriterConfig.OFF
        )
    return config


# The x86 CPU flags (as /proc/cpuinfo names them) of bfloat16 instructions:
# AVX512_BF16 (Cooper Lake, Zen 4 and later) or AMX (Sapphire Rapids).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bfloat16(cpuinfo_path="/proc/cpuinfo"):
    """Whether the CPU has bfloat16 instructions (False when unknown)."""
    try:
        with open(cpuinfo_path) as f:
            words = set(f.read().split())
    except OSError:
        return False
    return any(flag in words for flag in BFLOAT16_CPU_FLAGS)


def compute_dtype(
    use_fp16, devices, force_cpu_bfloat16=False, cpu_bfloat16=None
):
    """The dtype the layers compute in: float32, or with use_fp16 float16
    on GPUs and bfloat16 on CPUs that have its instructions (cpu_bfloat16,
    None: `cpu_has_bfloat16()`); emulated, it runs about ten times slower
    than float32, so only with force_cpu_bfloat16. Prints which, and why.
    """
    if not use_fp16:
        return tf.float32
    if devices[0].startswith("/gpu"):
        if force_cpu_bfloat16:
            raise ValueError(
                "--force_cpu_bfloat16 applies only to towers on the CPU, and "
                "this run computes on GPUs, in float16, so it would be "
                "ignored; drop --force_cpu_bfloat16"
            )
        print(
            "--use_fp16: computing in float16 on the GPUs (variables stay "
            "float32)"
        )
        return tf.float16
    if cpu_bfloat16 is None:
        cpu_bfloat16 = cpu_has_bfloat16()
    if cpu_bfloat16 or force_cpu_bfloat16:
        print(
            "--use_fp16: computing in bfloat16 on the CPU, %s (variables "
            "stay float32)"
            % (
                "which has bfloat16 instructions"
                if cpu_bfloat16
                else "emulated without its instructions (--force_cpu_bfloat16)"
            )
        )
        return tf.bfloat16
    print(
        "WARNING: --use_fp16 on a CPU without bfloat16 instructions "
        "(AVX512_BF16 or AMX), where bfloat16 is emulated about 10x slower: "
        "computing in float32; pass --force_cpu_bfloat16 to use bfloat16 "
        "anyway.",
        file=sys.stderr,
    )
    return tf.float32
