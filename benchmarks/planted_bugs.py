"""Plants known bugs one at a time and says which quick check caught each.

  python -m benchmarks.planted_bugs                        # every bug
  python -m benchmarks.planted_bugs --bugs=copy_gap_ignored  # some

Copies the suite's files (tracked and new, as they are in the working
tree) to a scratch folder, runs every bug's checks there once unplanted
(each must pass: a check that fails anyway proves nothing), then, for
each bug of BUGS, replaces its text in its file, runs its checks (tests
of `-m "not slow"`, each a pytest node id, in one pytest process), and
puts the file back. Prints a table (bug | what | check | caught by |
result) and exits 1 unless every bug was caught. The repository itself
is never written; the scratch folder is removed at the end. Every bug
takes a pytest process (10 s to start TensorFlow) and its checks' time:
13 minutes for 18 bugs on 2 CPU cores shared with other work.
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Seconds one pytest run of a bug's checks may take.
TIMEOUT_SECS = 900

Bug = collections.namedtuple("Bug", "name path old new description checks")
Bug.__doc__ = """One planted bug.

name: str, what --bugs takes.
path: str, the file, relative to the repository.
old, new: str, the exact text (found once in the file) and its replacement.
description: str, one line.
checks: tuple of str, pytest node ids (of tests under -m "not slow") that
  should fail with the bug planted.
"""

_CELL = (
    "tests/test_equivalence.py::"
    "test_each_cell_of_the_fast_slice_trains_what_one_device_trains[%s]"
)
_TOLERANCE = "tests/test_equivalence_tolerance.py::"
_RESNET = (
    "tests/test_resnet_reference.py::"
    "test_resnet20_logits_equal_a_numpy_forward_pass_of_its_weights"
)

BUGS = [
    Bug(
        "copy_gap_ignored",
        "benchmarks/equivalence_table.py",
        "result.worst <= 1.0 and result.copy_gap == 0.0",
        "result.worst <= 1.0",
        "the runner's exit status ignores a copy that differs",
        (
            _TOLERANCE + "test_the_exit_code_counts_a_copy_gap_as_out_and_an_"
            "unsettled_cell_apart",
        ),
    ),
    Bug(
        "unsettled_passes",
        "benchmarks/equivalence_table.py",
        "return 1 if out or (unsettled and not allow_unsettled) else 0",
        "return 1 if out else 0",
        "the runner exits 0 with a cell whose tolerance never settled",
        (
            _TOLERANCE + "test_the_exit_code_counts_a_copy_gap_as_out_and_an_"
            "unsettled_cell_apart",
        ),
    ),
    Bug(
        "settles_on_a_tip",
        "benchmarks/equivalence_tolerance.py",
        "later[name] <= MULTIPLE * earlier[name]\n"
        "        and earlier[name] <= MULTIPLE * later[name]",
        "later[name] <= MULTIPLE * earlier[name]",
        "a run within the tolerance of the one before settles (one-sided)",
        (
            _TOLERANCE + "test_a_tip_then_smooth_runs_hold_the_towers_to_the_"
            "smooth_spread",
        ),
    ),
    Bug(
        "clipped_per_tower",
        "cifar10_multi_gpu_train.py",
        "    reduced = variable_update.reduce_gradients(update, tower_grads)\n"
        "    if clip_norm > 0:\n"
        "        reduced = [towers.clip_gradients(grads, clip_norm) "
        "for grads in reduced]\n",
        "    if clip_norm > 0:\n"
        "        tower_grads = [towers.clip_gradients(g, clip_norm) "
        "for g in tower_grads]\n"
        "    reduced = variable_update.reduce_gradients(update, tower_grads)\n",
        "gradients clipped per tower before the mean",
        (_CELL % "replicated-collective-tutorial-float32-2-1.5",),
    ),
    Bug(
        "shortcut_one_side",
        "cifar10_models/resnet.py",
        "[extra // 2, extra - extra // 2]",
        "[0, extra]",
        "the ResNet's shortcut pads its new channels on one side",
        (_RESNET,),
    ),
    Bug(
        "unfused_notice_shown",
        "multigpu/cpp_log_filter.py",
        "OpKernel for CPU devices ",
        "OpKernel for GPU devices ",
        "the runner's stderr shows the unfused float16 batch norm notice",
        (
            "tests/test_output.py::test_the_notice_of_an_unfused_float16_"
            "batch_norm_is_dropped_whole",
        ),
    ),
    Bug(
        "cuinit_notice_shown",
        "multigpu/cpp_log_filter.py",
        'rb"^E\\d{4} [^]]*\\] failed call to cuInit: "',
        'rb"^E\\d{4} [^]]*\\] failed call to cuInit; "',
        "the runner's stderr shows cuInit's error on a machine without a GPU",
        (
            "tests/test_output.py::test_the_harmless_lines_of_a_machine_"
            "without_a_gpu_are_dropped",
        ),
    ),
    Bug(
        "summed_gradients",
        "multigpu/graph/gradient_reduction.py",
        "return tf.math.add_n(grads) / len(grads)",
        "return tf.math.add_n(grads)",
        "the towers' gradients summed, not averaged",
        (_CELL % "parameter_server-None-tutorial-float32-2-0.0",),
    ),
    Bug(
        "rate_of_one_tower",
        "cifar10_multi_gpu_train.py",
        "examples = batch_size * len(devices) * task.replicas_per_step",
        "examples = batch_size * task.replicas_per_step",
        "the learning rate scaled by one tower's batch, not the step's",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "loss_scale_kept",
        "multigpu/graph/loss_scale.py",
        "(g / scale if g is not None else None, v)",
        "(g if g is not None else None, v)",
        "float16 gradients applied still multiplied by the loss scale",
        (_CELL % "parameter_server-None-layers-float16 fixed-2-0.0",),
    ),
    Bug(
        "no_regularizers",
        "multigpu/graph/towers.py",
        'tf.compat.v1.get_collection("losses", scope)\n'
        "        + regularization_losses(scope),",
        'tf.compat.v1.get_collection("losses", scope),',
        "a tower's loss without the layers' regularization terms",
        (_CELL % "replicated-collective-get_variable-float32-4-0.0",),
    ),
    Bug(
        "statistics_not_committed",
        "multigpu/graph/variable_update.py",
        "if not variables[name].trainable]",
        "if variables[name].trainable]",
        "the last tower's batch-norm statistics never reach the variables",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "averages_without_statistics",
        "multigpu/graph/any_model.py",
        "for var in tf.compat.v1.moving_average_variables():",
        "for var in []:",
        "the batch-norm statistics left out of the moving averages",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "clip_norm_doubled",
        "multigpu/graph/towers.py",
        "tf.clip_by_global_norm(list(grads), clip_norm)",
        "tf.clip_by_global_norm(list(grads), 2 * clip_norm)",
        "gradients clipped to twice --clip_gradients",
        (
            "tests/test_towers.py::test_clipping_bounds_the_global_norm_of_"
            "the_averaged_gradients",
            _CELL % "replicated-collective-tutorial-float32-2-1.5",
        ),
    ),
    Bug(
        "no_ulp_floor",
        "benchmarks/equivalence_tolerance.py",
        "float(np.spacing(np.float32(largest))),",
        "0.0,",
        "a spread of 0 where the measuring run repeats a value exactly",
        (
            _TOLERANCE + "test_a_spread_is_the_largest_gap_at_least_a_float32_"
            "ulp_and_0_for_an_int",
        ),
    ),
    Bug(
        "moved_in_float32",
        "benchmarks/equivalence_tolerance.py",
        "np.spacing(np.abs(value).astype(compute_dtype))",
        "np.spacing(np.abs(value))",
        "the measuring run moved by a float32 ulp in a float16 cell",
        (
            _TOLERANCE + "test_moving_by_one_ulp_moves_each_value_by_its_"
            "float16_spacing",
        ),
    ),
    Bug(
        "shortcut_odd_pixels",
        "cifar10_models/resnet.py",
        "x = x[:, ::strides, ::strides, :]",
        "x = x[:, 1::strides, 1::strides, :]",
        "the ResNet's shortcut subsamples the odd pixels",
        (_RESNET,),
    ),
    Bug(
        "batch_norm_epsilon",
        "cifar10_models/resnet.py",
        "BATCH_NORM_EPSILON = 1e-5",
        "BATCH_NORM_EPSILON = 1e-3",
        "the ResNet's batch norm with Keras' epsilon, not the paper's",
        (_RESNET,),
    ),
    Bug(
        "reference_shared_by_clip",
        "benchmarks/equivalence.py",
        "key = case._replace(update=None, all_reduce=None)",
        "key = (case.model, case.precision, case.towers)",
        "a clipped cell held to the unclipped cell's one device",
        (
            "tests/test_equivalence.py::test_cells_share_the_one_device_only_"
            "where_they_differ_in_the_update",
        ),
    ),
    Bug(
        "unsettled_row_ok",
        "benchmarks/equivalence_table.py",
        'return "ok" if result.settled else '
        '"UNSETTLED (within its widest spread)"',
        'return "ok"',
        "a row of an unsettled cell within its widest spread reads ok",
        (
            _TOLERANCE + "test_a_row_says_ok_only_of_a_settled_cell_within_"
            "tolerance",
        ),
    ),
]


def scratch_copy(folder):
    """The repository's files (tracked and new, not ignored) under folder."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)


def failed_checks(folder, checks):
    """The checks that fail (or do not run) in folder.

    Args:
      folder: Path, the scratch copy.
      checks: list of pytest node ids.

    Returns:
      set of the node ids that failed, errored or were not found.
    """
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rfE"]
        + ["-m", "not slow", "-p", "no:cacheprovider", *checks],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECS,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    failed = set()
    for line in run.stdout.splitlines():
        match = re.match(r"(FAILED|ERROR) (\S.*?)(?: - .*)?$", line)
        if match:
            failed.update(c for c in checks if match.group(2).startswith(c))
    if run.returncode != 0 and not failed:
        # A test file that fails to import, a node id not found or
        # deselected: none of them ran to pass.
        return set(checks)
    return failed


def plant(folder, bug):
    """Writes the bug into the scratch copy if its text is found once.

    Returns:
      str, the file's text before; None if the bug's text is not found
      exactly once (the file changed since the bug was written).
    """
    path = folder / bug.path
    text = path.read_text()
    if text.count(bug.old) != 1:
        return None
    path.write_text(text.replace(bug.old, bug.new))
    return text


def short(check):
    """A node id without its file: the test's name and parameters."""
    return check.split("::")[-1]


def try_bugs(folder, bugs):
    """Each bug planted in turn; returns the table's rows.

    Returns:
      list of (name, description, checks, caught_by, result) of str.
    """
    checks = sorted({check for bug in bugs for check in bug.checks})
    failing_unplanted = failed_checks(folder, checks)
    rows = []
    for bug in bugs:
        caught, result = _outcome(folder, bug, failing_unplanted)
        rows.append(
            (
                bug.name,
                bug.description,
                ", ".join(short(c) for c in bug.checks),
                ", ".join(short(c) for c in caught) or "-",
                result,
            )
        )
        print("| %s |" % " | ".join(rows[-1]), flush=True)
    return rows


def _outcome(folder, bug, failing_unplanted):
    """The bug's checks that failed with it planted, and the verdict."""
    if failing_unplanted.intersection(bug.checks):
        return [], "CHECK FAILS UNPLANTED"
    text = plant(folder, bug)
    if text is None:
        return [], "NOT PLANTED (its text is not found once)"
    try:
        caught = sorted(failed_checks(folder, list(bug.checks)))
    finally:
        (folder / bug.path).write_text(text)
    return caught, "caught" if caught else "MISSED"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bugs",
        help="comma-separated names of the bugs to plant (default: all): "
        + ", ".join(bug.name for bug in BUGS),
    )
    args = parser.parse_args()
    by_name = {bug.name: bug for bug in BUGS}
    names = args.bugs.split(",") if args.bugs else list(by_name)
    unknown = [name for name in names if name not in by_name]
    if unknown:
        parser.error("--bugs: no planted bug named %s" % ", ".join(unknown))
    bugs = [by_name[name] for name in names]
    with tempfile.TemporaryDirectory(prefix="planted_bugs_") as scratch:
        folder = Path(scratch)
        scratch_copy(folder)
        print("| bug | what | check | caught by | result |")
        print("| --- | --- | --- | --- | --- |", flush=True)
        rows = try_bugs(folder, bugs)
    caught = sum(row[-1] == "caught" for row in rows)
    print("%d of %d planted bug(s) caught" % (caught, len(rows)))
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
