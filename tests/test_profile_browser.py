"""TensorBoard's Profile tab on a --profile_steps run, in headless Chromium.

The tab's page (tensorboard-plugin-profile, XProf 2.21) loads its code only
once Google Charts' loader has loaded from www.gstatic.com: offline, the
tab stays blank. This machine is offline, so Chromium is sent to a stub of
the loader served on 127.0.0.1 (no charts drawn; the rest of the page is
the plugin's own). The screenshot is left in the test's temp folder for a
person to look at.
"""

import functools
import gzip
import http.server
import json
import re
import ssl
import subprocess
import threading
import urllib.request

import pytest
from conftest import free_port, run_script, tensorboard_server, trainer_flags
from helpers.browser import BROWSER_MARKS, chromium, wait_for_route

pytestmark = BROWSER_MARKS

# Google Charts' loader as the page calls it, drawing nothing.
CHARTS_LOADER_STUB = b"""window.google = {charts: {
  load: function () {},
  setOnLoadCallback: function (f) { setTimeout(f, 0); }
}};
"""


@pytest.fixture(scope="module")
def profiled_run(cifar10_data_dir, tmp_path_factory):
    """TensorBoard on a 3-step run that profiled steps 2 and 3.

    Yields:
      (the server's URL, the profile's run name, its host name).
    """
    train_dir = tmp_path_factory.mktemp("profiled")
    run_script(
        "cifar10_train.py",
        *trainer_flags(
            cifar10_data_dir,
            train_dir,
            "--max_steps=3",
            "--profile_steps=2,3",
        ),
    )
    (run,) = (train_dir / "plugins" / "profile").iterdir()
    (host_file,) = run.glob("*.xplane.pb")
    with tensorboard_server(
        train_dir.parent / "tensorboard.log", "--logdir=%s" % train_dir
    ) as (server, port):
        url = "http://127.0.0.1:%d" % port
        wait_for_route(
            url + "/data/plugin/profile/runs",
            server,
            json.dumps([run.name]).encode(),
        )
        yield url, run.name, host_file.name.split(".")[0]


def _json(url):
    """The JSON of one of the plugin's routes (gzipped, whatever is asked)."""
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


@pytest.fixture(scope="module")
def charts_stub(tmp_path_factory):
    """Chromium's flags that send www.gstatic.com to a local HTTPS server
    of `CHARTS_LOADER_STUB` (a self-signed certificate, made here)."""
    folder = tmp_path_factory.mktemp("gstatic")
    (folder / "charts").mkdir()
    (folder / "charts" / "loader.js").write_bytes(CHARTS_LOADER_STUB)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes"]
        + ["-keyout", str(folder / "key.pem"), "-out", str(folder / "c.pem")]
        + ["-days", "1", "-subj", "/CN=www.gstatic.com"],
        check=True,
        capture_output=True,
    )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", free_port()),
        functools.partial(
            http.server.SimpleHTTPRequestHandler, directory=str(folder)
        ),
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "c.pem", folder / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield (
            "--ignore-certificate-errors",
            "--host-resolver-rules=MAP www.gstatic.com:443 127.0.0.1:%d"
            % server.server_address[1],
        )
    finally:
        server.shutdown()
        server.server_close()


def _texts(dom):
    """The texts a person reads on a page, in order."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    return [
        text.strip()
        for text in re.split(r"<[^>]+>", dom)
        if text.strip() and text.strip() != "info"
    ]


def test_the_profile_tab_opens_on_the_runs_overview_page(
    profiled_run, charts_stub, tmp_path
):
    url, run, host = profiled_run
    chromium(
        tmp_path,
        url + "/#profile",
        "--screenshot=%s" % (tmp_path / "profile.png"),
        *charts_stub,
    )

    # The page the tab's frame shows.
    texts = _texts(
        chromium(
            tmp_path,
            url + "/data/plugin/profile/index.html",
            "--dump-dom",
            *charts_stub,
        )
    )

    start = texts.index("Sessions (1)")
    assert texts[start : start + 6] == [
        "Sessions (1)",
        run,
        "Tools (8)",
        "Overview Page",
        "Hosts (1)",
        host,
    ]
    summary = texts.index("Performance Summary")
    assert texts[summary + 1] == "All Others Time"
    environment = texts.index("Run Environment")
    assert texts[environment + 4 : environment + 10] == [
        "Number of Hosts used",
        ":",
        "1",
        "Device type",
        ":",
        "CPU",
    ]


def test_the_tab_lists_8_tools_and_the_overview_graphs_steps_2_and_3(
    profiled_run,
):
    url, run, host = profiled_run

    tools = _json(url + "/data/plugin/profile/run_tools?run=%s" % run)
    overview = _json(
        url
        + "/data/plugin/profile/data?run=%s&tag=overview_page&host=%s"
        % (run, host)
    )

    assert tools == [
        "overview_page",
        "trace_viewer@",
        "op_profile",
        "input_pipeline_analyzer",
        "memory_profile",
        "roofline_model",
        "framework_op_stats",
        "hlo_stats",
    ]
    # The step-time graph's table: a row per profiled step, named by the
    # trainer's global step.
    (step_table,) = [
        table
        for table in overview
        if any(
            column.get("id") == "stepnum" for column in table.get("cols", [])
        )
    ]
    assert [row["c"][0]["v"] for row in step_table["rows"]] == [
        "train 2",
        "train 3",
    ]
