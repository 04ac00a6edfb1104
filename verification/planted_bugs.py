"""Plants known bugs one at a time and says which quick check caught each.

  python -m verification.planted_bugs                        # every bug
  python -m verification.planted_bugs --bugs=copy_gap_ignored  # some

Installed as `tf1-planted-bugs`, which plants them in the checkout it was
installed from (`pip install -e .`): the bugs' checks are its tests.

Copies the suite's files (tracked and new, as they are in the working
tree) to a scratch folder, runs every bug's checks there once unplanted
(each must pass: a check that fails anyway proves nothing), then, for
each bug of BUGS (`planted_step_bugs`' and `planted_run_bugs`'),
replaces its text in its file, runs its checks (tests of `-m "not slow"`,
each a pytest node id, in one pytest process), and puts the file back.
Prints a table (bug | where | what | check | caught by | secs, how long
each catching check takes unplanted | how, pytest's line of each failure
| result) and exits 1 unless every bug was caught.
The repository itself is never written; the scratch folder is removed
at the end. Every bug takes a pytest process (10 s to start TensorFlow)
and its checks' time: 28 minutes for 36 bugs on 2 CPU cores shared with
other work (a load average of about 20), 13 minutes for 63 at a load of
about 5.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from verification import planted_run_bugs, planted_step_bugs

REPO = Path(__file__).resolve().parents[1]
# Seconds one pytest run of a bug's checks may take.
TIMEOUT_SECS = 900
# Characters of a failure's line the table keeps.
HOW_CHARS = 160

BUGS = planted_step_bugs.BUGS + planted_run_bugs.BUGS


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
    """The checks that fail (or do not run) in folder, and how.

    Args:
      folder: Path, the scratch copy.
      checks: list of pytest node ids.

    Returns:
      failed: dict {node id: str, pytest's one line of why it failed,
        errored or did not run} of the checks that did not pass.
      seconds: dict {node id: float}, each check's time (its tests' setup,
        call and teardown, as pytest's --durations reports them).
    """
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rfE"]
        + ["--durations=0", "--durations-min=0"]
        + ["-m", "not slow", "-p", "no:cacheprovider", *checks],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECS,
        # Wide enough that pytest's summary line keeps its message whole.
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "500"},
    )
    failed, seconds = {}, dict.fromkeys(checks, 0.0)
    for line in run.stdout.splitlines():
        match = re.match(r"(FAILED|ERROR) (\S.*?)(?: - (.*))?$", line)
        if match:
            for check in _covering(checks, match.group(2)):
                failed.setdefault(check, match.group(3) or match.group(1))
        timed = re.match(r"(\d+\.\d+)s (?:setup|call|teardown) +(\S.*)$", line)
        if timed:
            for check in _covering(checks, timed.group(2)):
                seconds[check] += float(timed.group(1))
    if run.returncode != 0 and not failed:
        # A test file that fails to import, a node id not found or
        # deselected: none of them ran to pass.
        return dict.fromkeys(checks, "did not run"), seconds
    return failed, seconds


def _covering(checks, node_id):
    """The checks (node ids, perhaps without parameters) of a test's."""
    return [check for check in checks if node_id.startswith(check)]


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
      list of (name, path, description, checks, caught_by, seconds, how,
      result) of str; seconds, each caught check's time unplanted; how,
      the first line of each caught check's failure.
    """
    checks = sorted({check for bug in bugs for check in bug.checks})
    failing_unplanted, seconds = failed_checks(folder, checks)
    rows = []
    for bug in bugs:
        caught, result = _outcome(folder, bug, failing_unplanted)
        rows.append(
            (
                bug.name,
                bug.path,
                bug.description,
                ", ".join(short(c) for c in bug.checks),
                ", ".join(short(c) for c in caught) or "-",
                ", ".join("%.2f" % seconds[c] for c in caught) or "-",
                "; ".join(_cut(how) for how in caught.values()) or "-",
                result,
            )
        )
        print("| %s |" % " | ".join(rows[-1]), flush=True)
    return rows


def _cut(how):
    """A failure's line for a table cell: at most HOW_CHARS, no '|'."""
    how = how.replace("|", "/")
    return how if len(how) <= HOW_CHARS else how[: HOW_CHARS - 3] + "..."


def _outcome(folder, bug, failing_unplanted):
    """The bug's checks that failed with it planted (dict, by node id, of
    how), and the verdict."""
    if set(failing_unplanted).intersection(bug.checks):
        return {}, "CHECK FAILS UNPLANTED"
    text = plant(folder, bug)
    if text is None:
        return {}, "NOT PLANTED (its text is not found once)"
    try:
        caught, _ = failed_checks(folder, list(bug.checks))
    finally:
        (folder / bug.path).write_text(text)
    caught = {check: caught[check] for check in sorted(caught)}
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
    if not (REPO / "tests").is_dir():
        parser.error(
            "no checkout of the suite at %s (its tests are the bugs' "
            "checks): install it with pip install -e from a clone" % REPO
        )
    with tempfile.TemporaryDirectory(prefix="planted_bugs_") as scratch:
        folder = Path(scratch)
        scratch_copy(folder)
        print(
            "| bug | where | what | check | caught by | secs | how | result |"
        )
        print("| --- " * 8 + "|", flush=True)
        rows = try_bugs(folder, bugs)
    caught = sum(row[-1] == "caught" for row in rows)
    print("%d of %d planted bug(s) caught" % (caught, len(rows)))
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
