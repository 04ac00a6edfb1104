"""Every command block of the README and of docs/ runs, and says what it shows.

The rules, which docs/testing.md states for writers of the pages:
- A ```sh block runs in bash (`set -eu`), in a temporary folder of its page
  (the current folder of every block of the page, in the page's order),
  which starts with the CIFAR-10 sample set in cifar10_data/ (as the
  README's first command leaves /tmp/cifar10_data; it is written once).
  Before it runs, mechanically: continuation lines are joined; `pip install
  ... && ` is dropped (the test runs in the installed project) and so is
  `python -m pytest ...` (.ci/run runs the README's; checked below); a
  command that runs a benchmark or a verification tool (`python -m
  benchmarks.NAME`, `python -m verification.NAME`) gets the flags of the
  `<!-- test: FLAGS -->` comment right before the block (a long run's
  cheaper variant); a trainer's command for several towers names
  `--cpu_towers` itself, so that it runs as written without GPUs;
  `--max_steps=N` (and the eval's `--last_step=N`) becomes N/100, rounded
  up; `python SCRIPT.py` runs the
  repository's script with each of its folder flags whose default is under
  /tmp/ given first, explicitly (a flag the command names comes later and
  wins); then /tmp/ becomes the page's folder, and a port `localhost:22NN` a
  free port. `tensorboard ARGS` starts TensorBoard with ARGS on 127.0.0.1,
  waits until it lists a run, prints the runs and stops it. A command already
  run on the page is not run again.
- A ```text block that starts with `$ COMMAND` runs COMMAND so, and prints the
  block's other lines: all of them exactly, or, if some are `...`, the others
  in order.
- A ```python block after `<!-- file: NAME -->` is written to NAME in the
  page's folder before its commands run; any other is only compiled.
- `<!-- given: mnist_idx in DIR -->` before a block writes small MNIST IDX
  files into DIR (the download the page asks of the reader).
- Other blocks (``` and ```text without `$`) are outputs and are not run;
  the README's sample run is checked in test_output.py.
"""

import collections
import functools
import math
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, SCRIPT_ENV, free_port
from helpers.mnist_files import random_split, write_idx
from helpers.output_lines import script_help

from data_sets import mnist_data

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"sh", "text", "python", ""}

Block = collections.namedtuple("Block", "line language text directives")

# Run before each block: TensorBoard on 127.0.0.1, stopped once it lists a run.
PRELUDE = r"""set -eu
tensorboard() {
python - "$@" <<'PROBE'
import json, re, subprocess, sys, time, urllib.request
server = subprocess.Popen(
    ["tensorboard", *sys.argv[1:], "--host=127.0.0.1", "--port=0"],
    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    url = next(m.group(0) for line in server.stderr
               for m in [re.search(r"http://127\.0\.0\.1:\d+/", line)] if m)
    runs, deadline = [], time.time() + 60
    while not runs and time.time() < deadline:
        time.sleep(0.5)
        runs = json.load(urllib.request.urlopen(url + "data/runs"))
    print("tensorboard runs:", " ".join(sorted(runs)))
    sys.exit(0 if runs else 1)
finally:
    server.terminate()
    server.wait(30)
PROBE
}
"""


def blocks(page):
    """The fenced blocks of a page, each with the comments right before it."""
    lines = page.read_text().splitlines()
    found, directives, index = [], {}, 0
    while index < len(lines):
        line = lines[index]
        comment = re.fullmatch(r"<!-- (\w+): (.*) -->", line)
        if comment:
            directives[comment.group(1)] = comment.group(2)
        elif line.startswith("```"):
            end = lines.index("```", index + 1)
            text = "\n".join(lines[index + 1 : end]) + "\n"
            found.append(Block(index + 1, line[3:], text, directives))
            directives, index = {}, end
        elif line.strip():
            directives = {}
        index += 1
    return found


@functools.lru_cache(maxsize=None)
def help_defaults(script):
    """{flag: default} of a script's --help: '  --flag (default: D; ...'."""
    return dict(
        re.findall(
            r"^  --(?:\[no\])?(\w+) \(default: ([^;)]*)",
            script_help(script).stdout,
            re.M,
        )
    )


def folder_flags(script):
    """The script's folder flags whose default is under /tmp/, as given."""
    return " ".join(
        "--%s=%s" % (name, default)
        for name, default in help_defaults(script).items()
        if default.startswith("/tmp/")
    )


def runnable(line, test_flags, folder, ports):
    """One command line as the test runs it (the module docstring's rules)."""
    line = re.sub(r"^pip install \S+ && ", "", line)
    if line.startswith("python -m pytest"):
        return ""
    if test_flags and re.search(r"-m (benchmarks|verification)\.", line):
        command, background = re.fullmatch(r"(.*?)( &)?", line).groups()
        line = "%s %s%s" % (command, test_flags, background or "")
    line = re.sub(
        r"--(max_steps|last_step)=(\d+)",
        lambda m: "--%s=%d" % (m.group(1), math.ceil(int(m.group(2)) / 100)),
        line,
    )
    # The page's /tmp/ only: the repository may itself live under /tmp/.
    line = line.replace("/tmp/", "%s/" % folder)
    line = re.sub(
        r"\bpython (\w+\.py)",
        lambda m: (
            "python %s %s"
            % (
                REPO / m.group(1),
                folder_flags(m[1]).replace("/tmp/", "%s/" % folder),
            )
        ),
        line,
    )
    return re.sub(
        r"localhost:(22\d\d)",
        lambda m: "localhost:%d" % ports.setdefault(m.group(1), free_port()),
        line,
    )


def give(directive, folder):
    """Writes what a `given:` comment names: small MNIST IDX files."""
    name, path = directive.split(" in ")
    assert name == "mnist_idx", directive
    idx_dir = folder / path.replace("/tmp/", "")
    idx_dir.mkdir(parents=True)
    sizes = {"train": mnist_data.VALIDATION_SIZE + 150, "test": 20}
    for (images_name, labels_name), size, seed in [
        ((mnist_data.TRAIN_IMAGES, mnist_data.TRAIN_LABELS), sizes["train"], 1),
        ((mnist_data.TEST_IMAGES, mnist_data.TEST_LABELS), sizes["test"], 2),
    ]:
        images, labels = random_split(size, seed)
        write_idx(idx_dir / images_name, images, mnist_data.IMAGES_MAGIC)
        write_idx(idx_dir / labels_name, labels, mnist_data.LABELS_MAGIC)


def block_commands(block):
    """The command lines of a ```sh block, or of a `$ ` text block."""
    if block.language == "sh":
        return block.text.replace("\\\n", " ").splitlines()
    if block.text.startswith("$ "):
        return [block.text.splitlines()[0][2:]]
    return []


def run_bash(script, folder):
    """Runs a block's script in folder; returns stdout, asserting exit 0."""
    path = "%s:%s" % (os.path.dirname(sys.executable), SCRIPT_ENV["PATH"])
    result = subprocess.run(
        ["bash", "-c", PRELUDE + script],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
        # The CIFAR-10 scripts' per-model default folders are in $TMPDIR.
        env=dict(
            SCRIPT_ENV, PATH=path, TMPDIR=str(folder), PYTHONPATH=str(REPO)
        ),
    )
    assert result.returncode == 0, "%s\n%s\n--- stderr ---\n%s" % (
        script,
        result.stdout,
        result.stderr[-5000:],
    )
    return result.stdout


def shows(expected, output):
    """Whether output holds expected's lines: all, or in order around '...'."""
    if "..." not in expected:
        return output.splitlines() == expected
    remaining = iter(output.splitlines())
    return all(
        any(line == found for found in remaining)
        for line in expected
        if line != "..."
    )


def pages_with_commands():
    return [
        page
        for page in PAGES
        if any(
            block.language == "sh" or block.text.startswith("$ ")
            for block in blocks(page)
        )
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", pages_with_commands(), ids=lambda page: page.name
)
def test_every_command_block_of_the_page_runs_as_written(
    page, tmp_path, cifar10_data_dir
):
    ports, done = {}, set()
    (tmp_path / "cifar10_data").symlink_to(cifar10_data_dir)
    for block in blocks(page):
        if "file" in block.directives:
            (tmp_path / block.directives["file"]).write_text(block.text)
    for block in blocks(page):
        if "given" in block.directives:
            give(block.directives["given"], tmp_path)
        commands = block_commands(block)
        if not commands:
            continue
        lines = [
            runnable(line, block.directives.get("test"), tmp_path, ports)
            for line in commands
        ]
        if block.language == "sh":
            lines = [line for line in lines if line not in done or "&" in line]
            done.update(lines)
        output = run_bash("\n".join(lines), tmp_path)
        expected = block.text.splitlines()[1:]
        if block.language == "text":
            assert shows(expected, output), (page.name, block.line, output)


def test_every_command_for_several_towers_runs_as_written_without_a_gpu():
    # --cpu_towers changes nothing where the GPUs are; without it a command
    # for 2 GPUs, copied on a machine without them, exits 1.
    without = [
        (page.name, line)
        for page in PAGES
        for block in blocks(page)
        for line in block_commands(block)
        if re.search(r"--num_gpus=(?!1\b)\d", line)
        and not re.search(r"--cpu_towers|--dry_run", line)
    ]
    assert without == []


def test_blocks_are_commands_outputs_or_python():
    found = {
        (page.name, block.line): block.language
        for page in PAGES
        for block in blocks(page)
        if block.language not in LANGUAGES
    }
    assert found == {}


def test_every_python_block_compiles():
    compiled = collections.Counter()
    for page in PAGES:
        for block in blocks(page):
            if block.language == "python":
                compile(block.text, "%s:%d" % (page.name, block.line), "exec")
                compiled[page.name] += 1
    # The pages that show Python: a user's model, the tutorial's code.
    assert compiled == {"models.md": 1, "tutorial_code.md": 2}


def test_a_block_waits_on_each_background_process_by_its_pid():
    # A bare `wait` ends 0 whatever its processes ended with, so the block
    # would pass when they failed; `wait $PID` under `set -e` fails it.
    bare = [
        (page.name, block.line)
        for page in PAGES
        for block in blocks(page)
        if block.language == "sh"
        and re.search(r"(^|&& |; )wait\s*($|&&|;)", block.text, re.M)
    ]
    assert bare == []


def test_the_readme_fits_on_a_few_screens():
    assert len(README.read_text().splitlines()) <= 200


def test_ci_runs_the_readmes_set_up_and_test_commands():
    setup = blocks(README)[0].text.splitlines()
    assert setup[0].startswith("pip install . && python cifar10_train.py")
    install, test = setup[1].split(" && ")
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert install == 'pip install ".[test]"'
    assert any(
        line.startswith("python -m pip install") and '".[test]"' in line
        for line in ci
    ), ci
    assert ci[-1] == test


def test_the_readme_links_every_page_of_docs_and_only_pages_that_exist():
    linked = set(re.findall(r"\]\((docs/[\w.]+\.md)", README.read_text()))
    pages = {"docs/" + page.name for page in PAGES[1:]}
    assert linked == pages


def test_links_between_pages_name_pages_that_exist():
    missing = [
        (page.name, target)
        for page in PAGES
        for target in re.findall(r"\]\(([\w./]+\.md)", page.read_text())
        if not (page.parent / target).exists()
    ]
    assert missing == []


def test_no_page_counts_tests_or_promises_a_duration():
    counted = [
        (page.name, found.group(0))
        for page in PAGES
        for found in re.finditer(
            r"\b\d[\d,]* tests\b|\babout \d+ (minutes|seconds)\b",
            page.read_text(),
        )
    ]
    assert counted == []


def flag_paragraphs():
    """(page, script, paragraph) of each 'Flags of `SCRIPT`:' paragraph."""
    return [
        (page.name, found.group(1), found.group(0))
        for page in PAGES
        for found in re.finditer(
            r"Flags of `(\w+\.py)`:(?:.+\n)+", page.read_text()
        )
    ]


@pytest.mark.parametrize(
    "page, script, paragraph",
    flag_paragraphs(),
    ids=lambda value: value if value.endswith((".md", ".py")) else "",
)
def test_the_flags_a_page_lists_exist_with_the_defaults_it_gives(
    page, script, paragraph
):
    defaults = help_defaults(script)
    named = re.findall(r"`--(\w+)`", paragraph)
    assert [name for name in named if name not in defaults] == []
    given = {
        name: found.group(0).replace(",", "")
        for name, text in re.findall(r"`--(\w+)`\s+\(([^)]*)\)", paragraph)
        for found in [re.match(r"[\d,.]+(?<![,.])|/[\w/]+", text)]
        if found
    }
    assert len(given) >= 3, paragraph
    assert {name: _value(defaults[name]) for name in given} == {
        name: _value(default) for name, default in given.items()
    }


def _value(text):
    """A number as a float ('0' and '0.0' alike), anything else as text."""
    try:
        return float(text)
    except ValueError:
        return text
