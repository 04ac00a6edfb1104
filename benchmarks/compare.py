"""The speed check before every stop: the working tree against a revision.

Run it from the repository root (18 minutes with the defaults on 2 shared
cores of an AMD EPYC without bfloat16, where fp16 has nothing to run):
  python -m benchmarks.compare                 # against origin/main
  python -m benchmarks.compare --base=5a940a4 --rounds=3 --only=train,hooks

For each headline benchmark (train, hooks, towers, fp16) it runs
`python -m benchmarks.bench_NAME --rounds=1` in a copy of the base revision
(`git archive`, outside the work tree) and in the working tree, each in a
fresh process, alternately: base then tree in odd rounds, tree then base in
even ones, so that neither always runs first. Both use this Python and its
packages. Each variant of a benchmark (e.g. hooks' `bare` and
`run_training`) is compared by its examples per CPU second, steadier than
wall-clock time on a shared machine: the ratio tree/base of each round,
their median and their range. A row is 'slower' when its median is below
1 - --threshold, 'faster' above 1 + --threshold, otherwise 'same'; the
command exits 1 when a row is slower. Nothing is timed by the tests: this
script measures, a person reads it.

Why a script and not airspeed velocity (asv), which compares commits too:
asv builds an environment per commit (TensorFlow installed in each) and
runs one commit's benchmarks after the other's, while on a shared 2-core
machine only rounds interleaved side by side give a ratio to trust; and
its benchmarks would be a second copy of `benchmarks/`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks import machine
from verification.machine import cpu_info

# The benchmarks whose variants the check compares, in the order printed.
HEADLINE_BENCHMARKS = ("train", "hooks", "towers", "fp16")
# The base revision by default: the last landed main, as a clone knows it.
DEFAULT_BASE = "origin/main"
# Below 1 - THRESHOLD a tree/base ratio is a slowdown to explain.
THRESHOLD = 0.03


def parse_args():
    """--base, --rounds, --only, --threshold and --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base",
        default=DEFAULT_BASE,
        help="the revision compared with the working tree (default %s, "
        "else HEAD)" % DEFAULT_BASE,
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--only",
        default=",".join(HEADLINE_BENCHMARKS),
        help="comma-separated benchmarks (default %(default)s)",
    )
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument(
        "--out", default=os.path.join(machine.RESULTS_DIR, "compare.json")
    )
    return parser.parse_args()


def resolve(revision):
    """The commit of revision; HEAD's when revision is the missing
    DEFAULT_BASE (a repository without that remote)."""
    found = _git("rev-parse", "--verify", "--quiet", revision + "^{commit}")
    if found is None and revision == DEFAULT_BASE:
        found = _git("rev-parse", "HEAD")
    if found is None:
        sys.exit(
            "compare: error: no revision %s in %s" % (revision, machine.REPO)
        )
    return found


def _git(*args):
    """git's output in the repository, stripped; None when git fails."""
    proc = subprocess.run(
        ["git", *args], cwd=machine.REPO, capture_output=True, text=True
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def export(commit, folder):
    """Writes the files of commit into folder (no .git, no work tree)."""
    archive = subprocess.Popen(
        ["git", "archive", commit], cwd=machine.REPO, stdout=subprocess.PIPE
    )
    subprocess.run(
        ["tar", "-x", "-C", folder], stdin=archive.stdout, check=True
    )
    if archive.wait():
        sys.exit("compare: error: git archive %s failed" % commit)


def check_imports_from(tree):
    """Exits unless a process started in tree imports the suite from it
    (an installed copy of the suite would hide the difference)."""
    found = subprocess.run(
        [sys.executable, "-c", "import multigpu; print(multigpu.__file__)"],
        cwd=tree,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not found.startswith(os.path.realpath(tree) + os.sep):
        sys.exit(
            "compare: error: a process in %s imports multigpu from %s; "
            "install the suite in editable mode (pip install -e .)"
            % (tree, found or "nowhere")
        )


def run_once(tree, name, out_dir):
    """One round of benchmarks.bench_<name> in tree, in a fresh process.

    Returns:
      dict variant -> examples per CPU second ({} when the benchmark has
      no rates on this machine, e.g. fp16 without bfloat16 instructions).
    """
    out = os.path.join(out_dir, name + ".json")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(os.path.join(out_dir, name + ".stderr"), "w") as stderr:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_" + name,
                "--rounds=1",
                "--out",
                out,
            ],
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    if proc.returncode:
        sys.exit(
            "compare: error: bench_%s failed in %s (exit %d); see %s"
            % (name, tree, proc.returncode, stderr.name)
        )
    with open(out) as f:
        rates = json.load(f)["rates"]
    return {variant: each["cpu_rate"] for variant, each in rates.items()}


def measure(trees, names, rounds, out_dir):
    """Runs every benchmark in both trees, alternately, rounds times.

    Args:
      trees: dict 'base' and 'tree' -> folder.
      names: the benchmarks.
      rounds: int.
      out_dir: str, where each run's JSON and stderr go.

    Returns:
      dict name -> dict 'base' and 'tree' -> a list per round of
      `run_once` results.
    """
    samples = {name: {"base": [], "tree": []} for name in names}
    for round_index in range(rounds):
        order = ("base", "tree") if round_index % 2 == 0 else ("tree", "base")
        for name in names:
            for side in order:
                result = run_once(trees[side], name, out_dir)
                samples[name][side].append(result)
                print(
                    "round %d, %s, %s: %s"
                    % (round_index + 1, name, side, _rounded(result)),
                    flush=True,
                )
    return samples


def _rounded(rates):
    return ", ".join("%s %.0f" % item for item in rates.items()) or "no rates"


def compare(samples, threshold):
    """The rows of the table: each variant's ratio tree/base and verdict.

    Returns:
      list of dicts: benchmark, variant, base and tree (median examples per
      CPU second), ratio (median of the rounds' ratios), low and high (their
      range), verdict.
    """
    rows = []
    for name, sides in samples.items():
        for variant in sides["base"][0]:
            base = [each[variant] for each in sides["base"]]
            tree = [each[variant] for each in sides["tree"]]
            ratios = [t / b for t, b in zip(tree, base)]
            ratio = statistics.median(ratios)
            rows.append(
                {
                    "benchmark": name,
                    "variant": variant,
                    "base": statistics.median(base),
                    "tree": statistics.median(tree),
                    "ratio": ratio,
                    "low": min(ratios),
                    "high": max(ratios),
                    "verdict": _verdict(ratio, threshold),
                }
            )
    return rows


def _verdict(ratio, threshold):
    if ratio < 1 - threshold:
        return "SLOWER"
    return "faster" if ratio > 1 + threshold else "same"


def table(rows, names):
    """The markdown table of `compare`'s rows; a line for each benchmark
    that has no rates here."""
    lines = [
        "| benchmark | variant | base, examples per CPU s | tree | "
        "tree / base (range) | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            "| %(benchmark)s | %(variant)s | %(base).0f | %(tree).0f | "
            "%(ratio).3f (%(low).3f-%(high).3f) | %(verdict)s |" % row
        )
    for name in names:
        if not any(row["benchmark"] == name for row in rows):
            lines.append("| %s | no rates on this machine | | | | |" % name)
    return "\n".join(lines)


def main():
    """Measures, prints the table, exits 1 when a variant is slower."""
    args = parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - set(HEADLINE_BENCHMARKS))
    if unknown:
        sys.exit(
            "compare: error: --only names %s; known: %s"
            % (", ".join(unknown), ", ".join(HEADLINE_BENCHMARKS))
        )
    commit = resolve(args.base)
    cpu = cpu_info()
    print(
        "working tree %s against %s (%s), %d rounds; %s: %s"
        % (
            machine.REPO,
            args.base,
            commit[:10],
            args.rounds,
            cpu["model"],
            ", ".join(cpu["flags"]) or "none",
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="compare_") as scratch:
        trees = {"base": os.path.join(scratch, "base"), "tree": machine.REPO}
        os.mkdir(trees["base"])
        export(commit, trees["base"])
        for tree in trees.values():
            check_imports_from(tree)
        samples = measure(trees, names, args.rounds, scratch)
    rows = compare(samples, args.threshold)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"base": commit, "cpu": cpu, "rows": rows}, f, indent=2)
    print(table(rows, names))
    print("threshold: %.0f%%; results in %s" % (100 * args.threshold, args.out))
    sys.exit(1 if any(row["verdict"] == "SLOWER" for row in rows) else 0)


if __name__ == "__main__":
    main()
