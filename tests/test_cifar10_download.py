"""maybe_download_and_extract against an HTTP server on 127.0.0.1."""

import http.server
import os
import tarfile
import threading
import types

import pytest
from conftest import (
    error_line,
    folder_contents,
    run_script,
    write_cifar10_files,
)

import cifar10_input
from data_sets import cifar10_data

ARCHIVE = "cifar-10-binary.tar.gz"


@pytest.fixture
def server(tmp_path):
    """Serves tmp_path/www on a free port of 127.0.0.1 from a thread.

    Yields:
      root: the served folder; url: the URL of its cifar-10-binary.tar.gz;
      requests: the paths requested so far.
    """
    root = tmp_path / "www"
    root.mkdir()
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            del args

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,))
    thread.start()
    yield types.SimpleNamespace(
        root=root,
        url="http://127.0.0.1:%d/%s" % (httpd.server_port, ARCHIVE),
        requests=requests,
    )
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _archive(server, tmp_path, names):
    """Serves a tar.gz of a tiny data set holding only the named files.

    Returns:
      dict file name -> its bytes.
    """
    source = tmp_path / "source"
    write_cifar10_files(source, records_per_file=2)
    folder = source / cifar10_input.BATCHES_DIR
    with tarfile.open(str(server.root / ARCHIVE), "w:gz") as tar:
        for name in names:
            tar.add(str(folder / name), cifar10_input.BATCHES_DIR + "/" + name)
    return {name: (folder / name).read_bytes() for name in names}


def test_download_shows_progress_extracts_and_happens_once(
    server, tmp_path, capsys
):
    names = cifar10_input.TRAIN_FILES + cifar10_input.TEST_FILES
    served = _archive(server, tmp_path, names)
    data_dir = tmp_path / "data"

    cifar10_data.maybe_download_and_extract(str(data_dir), server.url)
    archive = data_dir / ARCHIVE
    assert capsys.readouterr().out == (
        "\r>> Downloading %s 100.0%%\nDownloaded %s, %d bytes.\n"
        % (ARCHIVE, archive, (server.root / ARCHIVE).stat().st_size)
    )
    folder = data_dir / cifar10_input.BATCHES_DIR
    assert sorted(os.listdir(folder)) == sorted(names)
    for name in names:
        assert (folder / name).read_bytes() == served[name]
    assert server.requests == ["/" + ARCHIVE]

    cifar10_data.maybe_download_and_extract(str(data_dir), server.url)
    assert server.requests == ["/" + ARCHIVE]
    assert capsys.readouterr().out == ""


def test_a_broken_archive_is_an_error_and_is_removed(server, tmp_path):
    (server.root / ARCHIVE).write_bytes(b"an HTML error page, not a tar.gz")
    data_dir = tmp_path / "data"
    with pytest.raises(ValueError) as error:
        cifar10_data.maybe_download_and_extract(str(data_dir), server.url)
    archive = data_dir / ARCHIVE
    assert str(error.value).startswith(
        "%s is not a valid tar.gz archive (" % archive
    )
    assert "); removed it. CIFAR-10 files missing in " in str(error.value)
    assert not archive.exists()


def test_an_archive_without_the_test_file_names_it(server, tmp_path):
    _archive(server, tmp_path, cifar10_input.TRAIN_FILES)
    data_dir = tmp_path / "data"
    with pytest.raises(ValueError) as error:
        cifar10_data.maybe_download_and_extract(str(data_dir), server.url)
    assert str(error.value) == (
        "CIFAR-10 files missing in %s: test_batch.bin. Download "
        "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz and extract "
        "it in %s, or pass --fake_data to use a generated sample set."
        % (data_dir / cifar10_input.BATCHES_DIR, data_dir)
    )


@pytest.mark.slow
def test_a_trainer_without_fake_data_downloads_cifar10_and_trains_on_it(
    server, tmp_path
):
    _archive(server, tmp_path, cifar10_input.TRAIN_FILES + ["test_batch.bin"])
    data_dir = tmp_path / "data"
    result = run_script(
        "cifar10_train.py",
        "--data_dir=%s" % data_dir,
        "--data_url=%s" % server.url,
        "--train_dir=%s" % (tmp_path / "train"),
        "--batch_size=2",
        "--max_steps=1",
    )
    assert server.requests == ["/" + ARCHIVE]
    assert (
        "Downloaded %s, %d bytes.\n"
        % (data_dir / ARCHIVE, (server.root / ARCHIVE).stat().st_size)
        in result.stdout
    )
    assert "NOTE" not in result.stdout
    assert "Trained 1 step(s) in this run, from step 0 to step 1" in (
        result.stdout
    )


@pytest.mark.parametrize(
    "script", ["cifar10_train.py", "cifar10_multi_gpu_train.py"]
)
def test_a_trainer_without_fake_data_refuses_the_sample_set_in_one_line(
    script, tmp_path
):
    data_dir = tmp_path / "data"
    cifar10_data.write_fake_data(str(data_dir))
    before = folder_contents(tmp_path)
    line = error_line(
        script,
        *(["--cpu_towers"] if script == "cifar10_multi_gpu_train.py" else []),
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % (tmp_path / "train"),
    )
    assert line == (
        "%s: error: --data_dir=%s holds the built-in sample set (written by "
        "--fake_data), not CIFAR-10: pass --fake_data to train on it, or "
        "another --data_dir, where CIFAR-10 is downloaded" % (script, data_dir)
    )
    assert folder_contents(tmp_path) == before
