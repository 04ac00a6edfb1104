"""Runs every benchmark in one go and prints the table of their headlines.

Run it from the repository root (about 10 minutes on 2 cores; PyTorch from
the `bench` extra, `pip install -e ".[bench]"`, or its row says so):
  python -m benchmarks.run_all [--rounds=3] [--only=train,peers]
  python -m benchmarks.run_all --only=levers     # oneDNN, threads, XLA
  python -m benchmarks.run_all --only=options    # staged input, --xla
  python -m benchmarks.run_all --only=variable_update   # all-reduce cost
  python -m benchmarks.run_all --only=collective        # 2 workers

Each benchmark runs in its own process, one after the other (a fresh
TensorFlow each, so no session or thread pool of one benchmark sizes the
next); inside each, the variants compared run interleaved. The JSON results
go to --dir (default /tmp/tf1_benchmarks), with each benchmark's stderr
beside it; the markdown table is printed and written to --dir/table.md.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks import common, machine

# (module, question) in the order of the issue.
BENCHMARKS = (
    ("input", "1. Input pipeline alone"),
    ("train", "2. Real pipeline vs synthetic data"),
    ("peers", "3. Ours vs Keras 3 and PyTorch"),
    ("towers", "4. Tower overhead"),
    ("startup", "5. Start-up"),
    ("flops", "6. FLOPs and the matmul ceiling"),
    ("hooks", "7. Logging, summaries, checkpoints"),
    ("eval", "8. Eval vs training"),
    ("fp16", "9. --use_fp16 vs float32"),
    ("resnet", "12. ResNet-20 vs the tutorial net, Keras 3, PyTorch"),
)
# Run only when named in --only: slower, and a study rather than a check.
EXTRA_BENCHMARKS = (
    ("levers", "10. Levers without code changes"),
    ("options", "11. --prefetch_to_device and --xla"),
    ("variable_update", "12. --variable_update=replicated vs parameter_server"),
    ("collective", "13. 2 workers: collective replicated vs the ps cluster"),
)
ALL_BENCHMARKS = BENCHMARKS + EXTRA_BENCHMARKS


def run_benchmark(name, out_dir, rounds):
    """Runs benchmarks.bench_<name> in a child process.

    Returns:
      The benchmark's result dict, or {"error": ...} when it failed.
    """
    out = os.path.join(out_dir, name + ".json")
    command = [sys.executable, "-m", "benchmarks.bench_" + name, "--out", out]
    if rounds:
        command.append("--rounds=%d" % rounds)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    with open(os.path.join(out_dir, name + ".stderr"), "w") as stderr:
        proc = subprocess.run(
            command,
            cwd=machine.REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    seconds = round(time.perf_counter() - start, 1)
    print("%s: %.1f s, exit %d" % (name, seconds, proc.returncode), flush=True)
    if proc.returncode:
        return {"error": "exit %d, see %s.stderr" % (proc.returncode, name)}
    with open(out) as f:
        result = json.load(f)
    result["wall_seconds"] = seconds
    return result


def table(results):
    """The markdown table: one row per headline measure of each benchmark.

    Load is the 1-minute load average at the benchmark's start and end;
    Others is the most cores other processes kept busy while a variant of
    the benchmark was timed (the median over its rounds; 0 on a quiet
    machine, 1 when another job holds one of the 2 cores); CPU is the
    model and its bfloat16 and vector instruction sets
    (`verification.machine.cpu_info`).
    """
    rows = [
        "| Question | Measure | Value | Goal | Met | Load | Others | CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, question in ALL_BENCHMARKS:
        if name not in results:
            continue
        result = results[name]
        if "error" in result:
            rows.append(
                "| %s | error | %s | | | | | |" % (question, result["error"])
            )
            continue
        load = "%.1f-%.1f" % tuple(result["load_1min"].values())
        others = [
            rate["others_cores"]
            for rate in result["rates"].values()
            if "others_cores" in rate
        ]
        others = "%.2f" % max(others) if others else ""
        cpu = result.get("cpu", {"model": "unknown", "flags": []})
        cpu = "%s: %s" % (cpu["model"], ", ".join(cpu["flags"]) or "none")
        for measure, value in result["headline"].items():
            cells = (value, "", "")
            if isinstance(value, dict):
                basis = value.get("basis", "wall")
                notes = [] if basis == "wall" else [basis]
                if "spread" in value:
                    notes.append("spread %s over the rounds" % value["spread"])
                shown = value["value"]
                if notes:
                    shown = "%s (%s)" % (shown, "; ".join(notes))
                if "met" in value:
                    met = "yes" if value["met"] else "**no**"
                    cells = (shown, value["target"], met)
                else:
                    cells = (shown, "", "")
            rows.append(
                "| %s | %s | %s | %s | %s | %s | %s | %s |"
                % ((question, measure) + cells + (load, others, cpu))
            )
            question = ""
    return "\n".join(rows)


def main():
    """Runs the chosen benchmarks, then prints and writes the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=common.RESULTS_DIR)
    parser.add_argument(
        "--rounds", type=int, default=0, help="override every benchmark's"
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated names (%s); default all but %s"
        % (
            ",".join(name for name, _ in ALL_BENCHMARKS),
            ",".join(name for name, _ in EXTRA_BENCHMARKS),
        ),
    )
    args = parser.parse_args()
    names = [name for name, _ in ALL_BENCHMARKS]
    chosen = args.only.split(",") if args.only else [n for n, _ in BENCHMARKS]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error("unknown benchmark(s) %s; known: %s" % (unknown, names))
    os.makedirs(args.dir, exist_ok=True)
    results = {
        name: run_benchmark(name, args.dir, args.rounds)
        for name in names
        if name in chosen
    }
    markdown = table(results)
    with open(os.path.join(args.dir, "table.md"), "w") as f:
        f.write(markdown + "\n")
    with open(os.path.join(args.dir, "run_all.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(markdown)


if __name__ == "__main__":
    main()
