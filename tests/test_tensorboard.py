"""The real TensorBoard server shows what the trainer and the eval wrote.

The server runs as users run it, on 127.0.0.1, over a --train_dir and an
--eval_dir; the tests read its HTTP data routes (internal to TensorBoard,
hence the version pinned in pyproject.toml).
"""

import json
import struct
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from conftest import (
    WATCHED_MAX_STEPS,
    read_events,
    run_script,
    tensorboard_server,
    trainer_flags,
)

# The runs of --logdir_spec=train:TRAIN_DIR,eval:EVAL_DIR, as TensorBoard
# names them (each folder is the run '.' below its name).
TRAIN, EVAL = "train/.", "eval/."
# The loss chart, which TensorBoard shows first.
LOSS = "Loss/total_loss"
# Seconds the server has to start and load both runs.
LOAD_TIMEOUT_SECS = 90
# Summaries every 10 steps from the first (the default for a run of 200
# steps: 20 points), and at WATCHED_MAX_STEPS.
SUMMARY_STEPS = [*range(1, WATCHED_MAX_STEPS, 10), WATCHED_MAX_STEPS]
# The histograms: with the first summaries, then every 100 steps, and at the
# last step.
HISTOGRAM_STEPS = [1, 101, WATCHED_MAX_STEPS]


class TensorBoard:
    """Reads the data routes of a running TensorBoard server."""

    def __init__(self, port):
        self._port = port

    def get(self, route, **query):
        """Returns the body of /data/plugin/ROUTE?QUERY, as bytes."""
        url = "http://127.0.0.1:%d/data/plugin/%s?%s" % (
            self._port,
            route,
            urllib.parse.urlencode(query),
        )
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read()

    def json(self, route, **query):
        return json.loads(self.get(route, **query))

    def scalars(self, run, tag):
        """[(step, value)] of a scalar summary."""
        return [
            (step, value)
            for _, step, value in self.json("scalars/scalars", run=run, tag=tag)
        ]


def _wait_until_loaded(tensorboard, server, expected):
    """Polls until the server shows every expected point, or fails.

    Args:
      expected: dict (run, tag) -> number of points.
    """
    deadline = time.monotonic() + LOAD_TIMEOUT_SECS
    while True:
        try:
            if all(
                len(tensorboard.scalars(run, tag)) == count
                for (run, tag), count in expected.items()
            ):
                return
        except (urllib.error.URLError, ConnectionError):
            pass  # Not listening yet, or the run not loaded yet.
        assert server.poll() is None, "tensorboard exited"
        assert time.monotonic() < deadline, "not loaded in time"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tensorboard(watched_training, tmp_path_factory):
    """A TensorBoard server over the runs of `watched_training`."""
    log_path = tmp_path_factory.mktemp("tensorboard") / "tensorboard.log"
    with tensorboard_server(
        log_path,
        "--logdir_spec=train:%s,eval:%s"
        % (watched_training.train_dir, watched_training.eval_dir),
        "--load_fast=false",
    ) as (server, port):
        tensorboard = TensorBoard(port)
        _wait_until_loaded(
            tensorboard,
            server,
            {
                (TRAIN, LOSS): len(SUMMARY_STEPS),
                (EVAL, "Precision @ 1"): len(
                    read_events(watched_training.eval_dir).Scalars(
                        "Precision @ 1"
                    )
                ),
            },
        )
        yield tensorboard


@pytest.mark.slow
def test_tensorboard_shows_the_loss_and_learning_rate_of_training(
    tensorboard,
):
    assert [step for step, _ in tensorboard.scalars(TRAIN, LOSS)] == (
        SUMMARY_STEPS
    )
    raw_loss = tensorboard.scalars(TRAIN, LOSS + " (raw)")
    # About 4.7 at first: cross-entropy 2.3 plus weight decay 2.4.
    assert raw_loss[0] == (1, pytest.approx(4.7, abs=0.5))
    assert tensorboard.scalars(TRAIN, "Loss/learning_rate") == [
        (step, pytest.approx(0.1)) for step in SUMMARY_STEPS
    ]


@pytest.mark.slow
def test_tensorboard_shows_the_precision_at_each_scored_checkpoint(
    tensorboard, watched_training
):
    precision = tensorboard.scalars(EVAL, "Precision @ 1")
    written = read_events(watched_training.eval_dir).Scalars("Precision @ 1")
    assert precision == [
        (p.step, pytest.approx(p.value, abs=1e-6)) for p in written
    ]
    steps = [step for step, _ in precision]
    assert steps == sorted(set(steps))
    assert steps[-1] == WATCHED_MAX_STEPS


@pytest.mark.slow
def test_tensorboard_shows_the_weight_histograms(tensorboard):
    histograms = tensorboard.json(
        "histograms/histograms", run=TRAIN, tag="conv1/weights"
    )
    assert [step for _, step, _ in histograms] == HISTOGRAM_STEPS
    # The buckets count every weight of conv1, 5x5x3x64.
    for _, _, buckets in histograms:
        assert sum(count for _, _, count in buckets) == 5 * 5 * 3 * 64


@pytest.mark.slow
def test_tensorboard_shows_the_input_images(tensorboard):
    # The summary tagged 'images' keeps 3 images, each under its own tag.
    tags = tensorboard.json("images/tags")[TRAIN]
    assert sorted(tags) == ["images/image/%d" % i for i in range(3)]
    images = tensorboard.json(
        "images/images", run=TRAIN, tag="images/image/0", sample=0
    )
    # TensorBoard keeps a sample of 10 of an image tag's 21 steps, the
    # last one always.
    steps = [image["step"] for image in images]
    assert len(steps) == 10
    assert set(steps) <= set(SUMMARY_STEPS)
    assert steps[-1] == WATCHED_MAX_STEPS
    query = urllib.parse.parse_qsl(images[-1]["query"])
    png = tensorboard.get("images/individualImage", **dict(query))
    # A PNG of the 24x24 training crop: signature, then the IHDR size.
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (24, 24)


def _graph_events(folder):
    """How many graph events the event files of folder (not below) hold."""
    import tensorflow as tf

    return sum(
        event.HasField("graph_def")
        for path in sorted(folder.glob("events.out.tfevents.*"))
        for event in tf.compat.v1.train.summary_iterator(str(path))
    )


@pytest.mark.slow
def test_a_restarted_run_and_its_evals_hold_one_graph(
    cifar10_data_dir, tmp_path
):
    train_dir = tmp_path / "train"
    for max_steps in (2, 4):
        run_script(
            "cifar10_train.py",
            *trainer_flags(cifar10_data_dir, train_dir),
            "--max_steps=%d" % max_steps,
        )
    for _ in range(2):
        run_script(
            "cifar10_eval.py",
            "--run_once",
            "--data_dir=%s" % cifar10_data_dir,
            "--checkpoint_dir=%s" % train_dir,
            "--num_examples=4",
            "--batch_size=4",
        )
    assert len(list(train_dir.glob("events.out.tfevents.*"))) == 2
    assert _graph_events(train_dir) == 1
    assert _graph_events(train_dir / "eval") == 0
