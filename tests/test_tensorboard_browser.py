"""TensorBoard as a person sees it: a 300-step run and its eval, opened in
headless Chromium (Debian's chromium package; .ci/run installs it).

The pages are read from the DOM Chromium renders (the charts drawn as SVG,
TensorBoard's forceSVG switch, so that their points can be counted); the
screenshots are left in the test's temp folder for a person to look at.
"""

import json
import re
import urllib.request

import numpy as np
import pytest
from conftest import run_script, tensorboard_server, trainer_flags
from google.protobuf import text_format
from helpers.browser import BROWSER_MARKS, chromium, wait_for_route
from PIL import Image
from tensorflow.core.framework import graph_pb2

pytestmark = BROWSER_MARKS

STEPS = 300


@pytest.fixture(scope="module")
def tensorboard(cifar10_data_dir, tmp_path_factory):
    """TensorBoard on the train_dir of a 300-step run scored once.

    Yields:
      (str, the server's URL; the train_dir).
    """
    root = tmp_path_factory.mktemp("browser")
    train_dir = root / "train"
    run_script(
        "cifar10_train.py",
        *trainer_flags(cifar10_data_dir, train_dir, "--max_steps=%d" % STEPS),
    )
    run_script(
        "cifar10_eval.py",
        "--run_once",
        "--data_dir=%s" % cifar10_data_dir,
        "--checkpoint_dir=%s" % train_dir,
        "--num_examples=100",
        "--batch_size=50",
    )
    log_path = root / "tensorboard.log"
    with tensorboard_server(log_path, "--logdir=%s" % train_dir) as (
        server,
        port,
    ):
        url = "http://127.0.0.1:%d" % port
        wait_for_route(url + "/data/runs", server, b'[".", "eval"]')
        yield url, train_dir, log_path


def test_the_first_open_card_is_a_loss_chart_of_at_least_20_points(
    tensorboard, tmp_path
):
    url, _, _ = tensorboard
    page = url + "/?forceSVG=true#timeseries"
    chromium(tmp_path, page, "--screenshot=%s" % (tmp_path / "scalars.png"))
    dom = chromium(tmp_path, page, "--dump-dom")
    groups = re.findall(r'class="group-title" title="([^"]+)"', dom)
    assert groups[:3] == ["Loss", "Precision @ 1", "Recall @ 5"]
    # The cards drawn before the second group's title: the first group's,
    # open.
    loss_group = dom[: dom.index('title="Precision @ 1"')]
    cards = loss_group.split("<card-view ")[1:]
    assert len(cards) == 5
    assert re.findall(r'title="(Loss/[^"]+)"', cards[0])[:1] == [
        "Loss/cross_entropy"
    ]
    # Its lines (the smoothed and the raw values): a point per summary, at
    # steps 1, 16, ..., 286 and 300.
    lines = re.findall(r' d="M([0-9.,L-]+)"', cards[0])
    assert [line.count("L") + 1 for line in lines] == [21, 21]


def test_the_train_run_has_the_one_graph_and_the_eval_run_none(tensorboard):
    url, _, log_path = tensorboard
    with urllib.request.urlopen(url + "/data/plugin/graphs/info") as r:
        info = json.loads(r.read())
    assert info == {".": {"run": ".", "tags": {}, "run_graph": True}}
    assert "more than one graph event" not in log_path.read_text()


def test_the_graph_top_level_is_its_blocks(tensorboard, tmp_path):
    url, _, _ = tensorboard
    with urllib.request.urlopen(
        url + "/data/plugin/graphs/graph?run=.&conceptual=false"
    ) as r:
        graph = text_format.Parse(r.read().decode(), graph_pb2.GraphDef())
    # The function library (39 functions: tf.data's maps, the conds) is
    # left out, which the page drew as a column of boxes beside the graph.
    assert len(graph.library.function) == 0
    top_level = sorted({node.name.split("/")[0] for node in graph.node})
    # 6 nodes (at most 12, as the Graphs page should show); the model's
    # variables are in its block.
    assert top_level == [
        "global_step",
        "input",
        "model",
        "session",
        "summaries",
        "update",
    ]


# The grey of a block's box on the Graphs page (a namespace, 'structure'
# colouring), and the page's graph pane in a 1400 x 1000 window: right of
# the side bar, below the tabs.
BLOCK_GREY = (238, 238, 238)
GRAPH_PANE = (350, 70, 1400, 1000)


def test_the_graphs_page_opens_on_the_main_graph_at_a_readable_size(
    tensorboard, tmp_path
):
    url, _, _ = tensorboard
    screenshot = tmp_path / "graphs.png"
    chromium(tmp_path, url + "/#graphs", "--screenshot=%s" % screenshot)
    pane = Image.open(screenshot).convert("RGB").crop(GRAPH_PANE)
    pixels = np.asarray(pane).astype(int)
    block = np.argwhere((pixels == BLOCK_GREY).all(axis=2))
    height, width = block.max(axis=0) - block.min(axis=0) + 1
    # The 6 blocks, stacked as the data flows, fill two thirds of the
    # window's height: each box large enough to read its name.
    assert (height >= 600, width >= 250) == (True, True), (height, width)
    # No coloured box (a function of the library) beside them.
    colourful = pixels.max(axis=2) - pixels.min(axis=2) > 30
    assert int(colourful.sum()) == 0
