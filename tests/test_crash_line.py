"""The line TensorFlow's C++ side writes before the process dies reaches the
user, and the exit code is the process's own, with the console filter on."""

import ctypes
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from helpers.scripts import user_env

# A line the filter drops (INFO), then a line it keeps: a failed CHECK, as
# TensorFlow's C++ side writes it before it aborts.
INFO_LINE = (
    b"I0000 00:00:1795560770.352574    5566 cpu_feature_guard.cc:227] This "
    b"TensorFlow binary is optimized to use available CPU instructions\n"
)
CHECK_FAILED_LINE = (
    b"F0000 00:00:1795560776.221159    5644 cuda_executor.cc:101] Check "
    b"failed: stream != nullptr\n"
)
# linux/prctl.h: this process adopts the orphans of its descendants.
PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
def orphans_come_here():
    """Makes the test the parent of any orphan of the processes it starts.

    A process whose parent died is otherwise adopted by init (which on some
    machines never reaps it); adopted here, the test can wait for it.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    assert prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    yield
    assert prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) == 0


def _without_core_file():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _run_with_the_filter(code):
    """Runs Python code after the scripts' first import, with the filter on.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as bytes.
    """
    env = user_env()
    env.pop("PYTHONFAULTHANDLER", None)
    return subprocess.run(
        [sys.executable, "-c", "from multigpu import quiet_cpp_logs\n" + code],
        capture_output=True,
        timeout=120,
        env=env,
        cwd=REPO,
        preexec_fn=_without_core_file,
    )


@pytest.mark.parametrize(
    "ending, returncode, filter_outlives_the_script",
    [
        ("os.abort()", -signal.SIGABRT, True),
        ("os.kill(os.getpid(), signal.SIGSEGV)", -signal.SIGSEGV, True),
        ("sys.exit(3)", 3, False),
    ],
    ids=["abort", "segfault", "exit"],
)
def test_the_last_cpp_line_is_shown_however_the_process_ends(
    ending, returncode, filter_outlives_the_script, orphans_come_here
):
    result = _run_with_the_filter(
        "import os, signal, sys\n"
        "print(open('/proc/self/task/%%d/children' %% os.getpid()).read())\n"
        "os.write(2, %r)\n"
        "%s\n" % (INFO_LINE + CHECK_FAILED_LINE, ending)
    )
    assert (result.returncode, result.stderr) == (returncode, CHECK_FAILED_LINE)
    [filter_pid] = map(int, result.stdout.split())
    if filter_outlives_the_script:
        # The filter outlived the script, passed the line on and ended.
        assert os.waitpid(filter_pid, 0) == (filter_pid, 0)
    else:
        # The script waited for its filter at exit.
        with pytest.raises(ChildProcessError):
            os.waitpid(filter_pid, 0)


def test_the_line_of_a_failed_tensorflow_check_is_shown():
    result = _run_with_the_filter(
        "import tensorflow as tf\n"
        "tf.compat.v1.disable_eager_execution()\n"
        "abort = tf.raw_ops.Abort(error_msg='the crash line')\n"
        "tf.compat.v1.Session().run(abort)\n"
    )
    assert result.returncode == -signal.SIGABRT
    lines = result.stderr.decode().splitlines()
    assert re.fullmatch(
        r"F\d{4} .*\] Abort_op intentional failure; the crash line", lines[0]
    ), result.stderr
    assert lines[1] == "*** Check failure stack trace: ***"


def test_ctrl_c_while_tensorflow_loads_is_one_line_with_the_filter_on(
    tmp_path,
):
    trainer = subprocess.Popen(
        [sys.executable, "cifar10_train.py", "--train_dir=%s" % tmp_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=user_env(),
        cwd=REPO,
    )
    # The filter started, so the Ctrl-C handler is set within microseconds;
    # TensorFlow takes seconds more to load.
    children = pathlib.Path("/proc/%d/task/%d/children" % ((trainer.pid,) * 2))
    deadline = time.monotonic() + 30
    while not children.read_text() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    trainer.send_signal(signal.SIGINT)
    # Reads to the end of stderr, which the filter holds too.
    _, stderr = trainer.communicate(timeout=60)
    assert trainer.returncode == 130
    assert stderr == (
        b"cifar10_train.py: interrupted (SIGINT) while starting; nothing was "
        b"written\n"
    )
    assert os.listdir(str(tmp_path)) == []
