"""Helpers of the tests that look at TensorBoard's pages in headless
Chromium (Debian's chromium package; .ci/run installs it)."""

import gzip
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

# Debian's chromium, for the tests that look at TensorBoard's pages.
CHROMIUM = shutil.which("chromium")
# The marks of a test file of TensorBoard's pages in Chromium.
BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium (apt-get install chromium)"
    ),
]
# Seconds TensorBoard has to start and load its runs.
TENSORBOARD_LOAD_SECS = 90
# Chromium's flags for a page rendered without a display, GPU or network.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
    # Virtual time runs the page's timers at once: the charts load.
    "--virtual-time-budget=30000",
)


def chromium(tmp_path, url, output, *flags):
    """Renders url in headless Chromium with a fresh profile.

    Args:
      output: '--dump-dom' (returns the DOM) or '--screenshot=PATH'.
      *flags: Chromium's flags beside CHROMIUM_FLAGS.
    """
    result = subprocess.run(
        [
            CHROMIUM,
            *CHROMIUM_FLAGS,
            *flags,
            "--user-data-dir=%s" % (tmp_path / "profile"),
            output,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def wait_for_route(url, server, expected):
    """Waits until TensorBoard's route url answers expected.

    Args:
      url: str, the route's address.
      server: the `tensorboard_server`'s process, which must not end.
      expected: bytes, the answer (gunzipped if the route gzips it).
    """
    deadline = time.monotonic() + TENSORBOARD_LOAD_SECS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read()
                if response.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if body == expected:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass  # Not listening yet.
        assert server.poll() is None, "tensorboard exited"
        assert time.monotonic() < deadline, "%s not loaded in time" % url
        time.sleep(0.5)
