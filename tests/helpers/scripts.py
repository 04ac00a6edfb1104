"""Running the suite's scripts and servers in subprocesses, as a user would."""

import contextlib
import os
import subprocess
import sys
import time

# REPO, SCRIPT_ENV and start_script are the accident runner's too.
from verification.processes import (  # noqa: F401
    REPO,
    SCRIPT_ENV,
    free_ports,
    start_script,
)


def run_script(script, *args, timeout=600, expect_success=True, env=None):
    """Runs one of the suite's scripts in a subprocess, as a user would.

    Scripts define absl flags, so each runs in its own process.

    Args:
      script: file name in the repository, e.g. 'cifar10_train.py'.
      *args: its command-line flags.
      timeout: seconds before the test fails instead of hanging.
      expect_success: assert the exit code is 0 (True) or non-zero (False).
      env: dict of environment variables to set beside SCRIPT_ENV's.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    result = subprocess.run(
        [sys.executable, str(REPO / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(SCRIPT_ENV, **(env or {})),
        cwd=REPO,
    )
    output = "%s\n--- stderr ---\n%s" % (result.stdout, result.stderr[-5000:])
    if expect_success:
        assert result.returncode == 0, output
    else:
        assert result.returncode != 0, output
    return result


# Worker 0 of a cluster that is never started, on CPU towers and the sample
# set: for what a trainer refuses in cluster mode before it starts a server.
UNSTARTED_WORKER_FLAGS = (
    "--cpu_towers",
    "--ps_hosts=localhost:2222",
    "--worker_hosts=localhost:2223",
    "--job_name=worker",
    "--fake_data",
)


def error_line(script, *flags, env=None):
    """Runs a script that must fail: exit 1, no traceback; its last line."""
    result = run_script(script, *flags, expect_success=False, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    return result.stderr.strip().split("\n")[-1]


def run_snippets(snippet, argvs, timeout):
    """Runs `python -c snippet` once per argv at once; returns exit codes.

    Every process is ended by the end of the call, whatever happens.
    """
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", snippet, *map(str, argv)],
            env=SCRIPT_ENV,
            cwd=REPO,
        )
        for argv in argvs
    ]
    try:
        return [process.wait(timeout=timeout) for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def free_port():
    """A port of 127.0.0.1 that no process listens on now."""
    return free_ports(1)[0]


@contextlib.contextmanager
def tensorboard_server(log_path, *flags):
    """Runs TensorBoard with flags on 127.0.0.1, its output going to log_path.

    Yields:
      (the server's `subprocess.Popen`, its port); stopped at the end.
    """
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tensorboard.main",
                *flags,
                "--host=127.0.0.1",
                "--port=%d" % port,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=SCRIPT_ENV,
        )
    try:
        yield server, port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def wait_for_log(process, log_path, text, timeout):
    """Waits until log_path holds text; fails if process ends first.

    Args:
      process: the `subprocess.Popen` writing log_path.
      text: str to wait for, e.g. 'step 10, loss'.
      timeout: seconds before the test fails.
    """
    deadline = time.monotonic() + timeout
    while text not in log_path.read_text():
        assert process.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)


def eval_once(data_dir, checkpoint_dir, eval_dir, *flags, **kwargs):
    return run_script(
        "cifar10_eval.py",
        "--run_once",
        "--data_dir=%s" % data_dir,
        "--checkpoint_dir=%s" % checkpoint_dir,
        "--eval_dir=%s" % eval_dir,
        *flags,
        **kwargs,
    )


def user_env():
    """The environment of a user who set no TensorFlow log level."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    return env


def run_code(code, *args, input=None):
    """Runs Python code with flags in a subprocess in the repository.

    Args:
      code: str, the program (`python -c code`).
      *args: its command-line arguments, str.
      input: str written to its stdin, or None.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
        env=SCRIPT_ENV,
        cwd=REPO,
    )


def run_user_script(folder, name, text, *args):
    """Writes a user's script into folder and runs it from there.

    Returns:
      The `subprocess.CompletedProcess`, stdout and stderr as text.
    """
    (folder / name).write_text(text)
    env = dict(SCRIPT_ENV, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, name, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=folder,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result


def wait_until(process, log_path, ready, timeout):
    """Waits, while the started script runs, until ready() holds.

    Args:
      process: the `subprocess.Popen` of `start_script`.
      log_path: its output, shown when it ends first.
      ready: a function of no argument, true once the wait is over.
      timeout: seconds before the test fails.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, log_path.read_text()[-3000:]
        assert time.monotonic() < deadline, "not ready"
        time.sleep(0.05)


def signal_when(process, log_path, ready, signum, timeout):
    """Sends signum to a started script once ready() holds (`wait_until`).

    The process is ended by the end of the call, whatever happens.

    Returns:
      (int, str): its exit code and output.
    """
    try:
        wait_until(process, log_path, ready, timeout)
        os.kill(process.pid, signum)
        process.wait(timeout=timeout)
    finally:
        process.kill()
        process.wait()
    return process.returncode, log_path.read_text()
