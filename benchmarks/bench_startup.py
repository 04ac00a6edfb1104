"""Start-up: launching cifar10_train.py to its first step line, and its RSS.

Run it from the repository root:
  python -m benchmarks.bench_startup [--rounds=3]

Interleaved, each round: `python -c "import tensorflow"` (the floor every
script pays), then `python cifar10_train.py --fake_data --max_steps=2
--log_frequency=1` with a new --train_dir, timed from launch to its
'training from step 0' line (the session created, the variables
initialised) and to its first 'step N, loss = ...' line. The
sample set is written before the first round, so its one-time writing is
not counted. Peak RSS of each child from os.wait4. Goal: the first step
under 5 s beyond the TensorFlow import.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import common, machine

NAME = "startup"
MAX_STEPS = 2
# The trainer's lines timed: its session is ready, its first step is done.
TRAINER_LINES = {
    "session_ready_seconds": re.compile(r": training from step [0-9]+"),
    "first_step_seconds": re.compile(r": step [0-9]+, loss = "),
}
IMPORT_TENSORFLOW = [sys.executable, "-c", "import tensorflow"]


def launch(command, lines=None):
    """Runs command to its end, timing it from launch.

    Args:
      command: list of str.
      lines: dict name -> compiled regex, or None; the time the first
        stdout line matching each appears is reported under its name.

    Returns:
      dict: run_seconds (to exit), cpu_seconds (the child's), peak_rss_mb,
      others_cores (as in `common.Stopwatch`), and a time per line.

    Raises:
      RuntimeError: the command failed.
    """
    busy = common.busy_cpu_seconds()
    start = time.perf_counter()
    proc = subprocess.Popen(
        command,
        cwd=machine.REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seen = {}
    for line in proc.stdout:
        for name, pattern in (lines or {}).items():
            if name not in seen and pattern.search(line):
                seen[name] = time.perf_counter() - start
    # wait4 gives this child's own resource usage (ru_maxrss in KiB).
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError("%s exited %d" % (command, proc.returncode))
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    result = {"run_seconds": wall, "cpu_seconds": cpu, **seen}
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    if busy is not None:
        others = (common.busy_cpu_seconds() - busy - cpu) / wall
        result["others_cores"] = max(0.0, others)
    return result


def trainer_variant(data_dir):
    """Returns a variant: cifar10_train.py on the sample set, fresh dir."""

    def run():
        train_dir = tempfile.mkdtemp(prefix="startup_", dir=common.RESULTS_DIR)
        try:
            return launch(
                [
                    sys.executable,
                    os.path.join(machine.REPO, "cifar10_train.py"),
                    "--fake_data",
                    "--max_steps=%d" % MAX_STEPS,
                    "--log_frequency=1",
                    "--data_dir=" + data_dir,
                    "--train_dir=" + train_dir,
                ],
                TRAINER_LINES,
            )
        finally:
            shutil.rmtree(train_dir)

    return run


def main():
    """Times the import and the trainer interleaved; reports the margin."""
    args = common.parse_args(NAME, __doc__)
    variants = {
        "import_tensorflow": lambda: launch(IMPORT_TENSORFLOW),
        "cifar10_train": trainer_variant(common.cifar10_data_dir()),
    }
    result = common.interleave(variants, args.rounds)
    beyond = round(
        result["cifar10_train"]["first_step_seconds"]
        - result["import_tensorflow"]["run_seconds"],
        2,
    )
    common.report(
        args,
        {
            "unit": "seconds, MiB",
            "max_steps": MAX_STEPS,
            "rates": result,
            "headline": {
                "first step beyond import, s": common.goal(beyond, 5.0, True),
                "import tensorflow, s": result["import_tensorflow"][
                    "run_seconds"
                ],
                "trainer session ready, s": result["cifar10_train"][
                    "session_ready_seconds"
                ],
                "trainer peak RSS, MiB": result["cifar10_train"]["peak_rss_mb"],
            },
        },
    )


if __name__ == "__main__":
    main()
