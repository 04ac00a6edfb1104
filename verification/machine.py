"""The CPU a run is measured or verified on, without TensorFlow.

The equivalence runner's table and the benchmarks' results name it.
"""

# The instruction sets of /proc/cpuinfo a result names: bfloat16 (AVX512_BF16,
# AMX; AVX-NE-CONVERT converts it) and what oneDNN's float32 kernels use
# (AVX-512, else AVX2).
CPU_FLAGS = (
    "avx512_bf16",
    "amx_bf16",
    "amx_tile",
    "avx512f",
    "avx_vnni",
    "avx_ne_convert",
    "avx2",
)


def cpu_info():
    """The CPU's model name and which of CPU_FLAGS it has, from /proc/cpuinfo.

    Returns:
      dict: model (str), flags (the CPU_FLAGS present), bf16 (bool: has
      AVX512_BF16 or AMX-BF16, so bfloat16 computes natively); model
      'unknown' and no flags where there is no /proc/cpuinfo.
    """
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    present = [flag for flag in CPU_FLAGS if flag in flags]
    bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    return {"model": model, "flags": present, "bf16": bf16}
