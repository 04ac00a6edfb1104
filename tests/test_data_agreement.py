"""Every worker of a cluster trains on the same data, or none starts.

Each worker reads its own --data_dir; before step 1 the workers compare
their training files' fingerprints as they compare their flags
(`train_dirs.with_setting`), so a worker whose folder holds other files
ends every worker in one line naming both.
"""

import os

import pytest
from helpers.cluster import FAULT_TIMEOUT_SECS

from data_sets import mnist_data, sample_sets
from multigpu.train_dir import train_dirs

SCRIPT = "mnist_multi_gpu_train.py"


def test_the_data_setting_names_the_data_and_hashes_its_files():
    data = sample_sets.Data("MNIST", ("train.tfrecords 10 0123",))
    settings = train_dirs.with_setting({"learning_rate": 0.1}, data)
    assert settings == {
        "learning_rate": 0.1,
        "data_dir": "MNIST, 1 file(s), sha256 %s"
        % sample_sets.digest(data.files),
    }
    assert train_dirs.with_setting(None, data) is None


def _half_sample_set(data_dir):
    """The MNIST sample set in data_dir, its train file cut to half."""
    mnist_data.write_fake_data(str(data_dir))
    size = mnist_data.FAKE_SPLIT_SIZES["train"] // 2
    images, labels = mnist_data.fake_examples(size, 0)
    mnist_data.write_records(
        os.path.join(str(data_dir), mnist_data.SPLIT_FILES["train"]),
        images,
        labels,
    )


@pytest.mark.slow
def test_workers_on_other_data_end_before_step_1_naming_both(
    make_cluster, tmp_path
):
    full, half = tmp_path / "mnist", tmp_path / "mnist_half"
    mnist_data.write_fake_data(str(full))
    _half_sample_set(half)
    cluster = make_cluster(
        2,
        "--data_dir=%s" % full,
        "--variable_update=replicated",
        "--batch_size=11",
        "--operation_timeout_secs=%d" % FAULT_TIMEOUT_SECS,
        script=SCRIPT,
        num_ps=0,
    )
    cluster.start("worker", 0)
    cluster.start("worker", 1, "--data_dir=%s" % half)
    found = [
        train_dirs.with_setting({}, mnist_data.training_data(str(folder)))[
            "data_dir"
        ]
        for folder in (full, half)
    ]
    for name in ("worker0", "worker1"):
        code, _ = cluster.wait(name)
        lines = cluster.log(name).strip().split("\n")
        assert code == 1, lines[-20:]
        assert lines[-1] == (
            "%s: error: --data_dir differs between the workers: worker task "
            '0 has "%s", worker task 1 has "%s"; start every worker with the '
            "same --data_dir (docs/cluster.md)" % (SCRIPT, *found)
        )
    assert not cluster.train_dir(0).joinpath("checkpoint").exists()
