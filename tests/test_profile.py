"""--profile_steps: the steps the trainers profile, and what the profile
holds, read with TensorFlow's own reader of the profiler's files."""

import collections

import pytest
from conftest import error_line, run_script, trainer_flags
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from data_sets import mnist_data
from multigpu.run import profile
from multigpu.train_dir import train_dirs


def profiled(profile_folder):
    """What the one profile of a profiler's run folder holds.

    Returns:
      (the global steps marked, in order: ints; op type -> set of the
      name scopes' first two parts of its ops, e.g. 'towers/tower_1').
    """
    (path,) = profile_folder.glob("*.xplane.pb")
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    steps, scopes = [], collections.defaultdict(set)
    for plane in space.planes:
        names = {k: each.name for k, each in plane.event_metadata.items()}
        stats = {k: each.name for k, each in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names[event.metadata_id]
                if name == profile.STEP_NAME:
                    steps += [
                        stat.int64_value
                        for stat in event.stats
                        if stats[stat.metadata_id] == "step_num"
                    ]
                elif ":" in name:  # An executor's op: 'NAME:TYPE'.
                    op_name, op_type = name.rsplit(":", 1)
                    scopes[profile.op_type_of(op_type)].add(
                        "/".join(op_name.split("/")[:2])
                    )
    return steps, scopes


def profile_line(result):
    """The closing report's line on the profile."""
    (line,) = [
        each
        for each in result.stdout.splitlines()
        if "--profile_steps=" in each
    ]
    return line


def profile_lines(result):
    """The closing report's lines on the profile, from its first on."""
    lines = result.stdout.splitlines()
    first = lines.index(profile_line(result))
    return lines[first : first + 2 + profile.TOP_OPS]


def tab_line(logdir):
    """The closing report's last line on a profile: the Profile tab."""
    return (
        "The whole profile: tensorboard --logdir=%s, then its Profile tab, "
        "whose charts load from the internet." % logdir
    )


def table_rows(table):
    """{(device, op type): (count, total, share)} of an op_profile.txt."""
    rows, device = {}, None
    for line in table.splitlines()[1:]:
        if line.endswith("of the ops' time"):
            device = line.split(": ")[0]
        elif line and not line.startswith("op type"):
            op_type, count, total, share = line.split()
            rows[device, op_type] = int(count), total, share
    return rows


@pytest.mark.parametrize("value", ["5,2", "0,2", "2,x", "1,2,3", "-1,2", "two"])
def test_profile_steps_other_than_first_last_from_step_1_are_refused(value):
    with pytest.raises(ValueError) as raised:
        profile.parse_steps(value)

    assert str(raised.value) == (
        "expected FIRST,LAST global steps with 1 <= FIRST <= LAST (e.g. "
        "--profile_steps=5,7; the first step of a new run is step 1), found "
        "'%s'" % value
    )


def test_one_step_and_a_range_are_read_and_empty_profiles_nothing():
    assert profile.parse_steps("4") == (4, 4)
    assert profile.parse_steps("2,5") == (2, 5)
    assert profile.parse_steps("") is None
    assert profile.profile_hooks("", "/tmp/anywhere") == []


@pytest.mark.slow
def test_a_trainer_refuses_a_backward_range_at_parsing_in_one_line(tmp_path):
    line = error_line(
        "cifar10_train.py", "--profile_steps=5,2", "--train_dir=%s" % tmp_path
    )

    assert line == (
        "cifar10_train.py: error: flag --profile_steps=5,2: expected "
        "FIRST,LAST global steps with 1 <= FIRST <= LAST (e.g. "
        "--profile_steps=5,7; the first step of a new run is step 1), found "
        "'5,2'"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_retired_trace_step_is_refused_naming_profile_steps(tmp_path):
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--trace_step=7",
        "--train_dir=%s" % tmp_path,
    )

    assert line == (
        "cifar10_multi_gpu_train.py: error: flag --trace_step=7: --trace_step "
        "is retired (the Chrome trace through TensorFlow's private timeline); "
        "use --profile_steps=7,7, the public profiler's profile for "
        "TensorBoard's Profile tab"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_profile_steps_with_a_dry_run_which_trains_nothing_is_refused(
    tmp_path,
):
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--dry_run",
        "--num_gpus=2",
        "--profile_steps=2,3",
        "--train_dir=%s" % tmp_path,
    )

    assert line == (
        "cifar10_multi_gpu_train.py: error: --profile_steps=2,3 does not "
        "apply with --dry_run, which builds the graph and prints its plan, "
        "with no session, no data and no file written, so it would be "
        "ignored; drop --profile_steps (or --dry_run)"
    )


def test_the_op_table_counts_an_ops_own_time_per_device(tmp_path):
    # One thread: a 10 us op holding a 4 us op, then a 3 us op; 'NAME:TYPE'
    # op events, and an event of the runtime that is no op.
    events = [
        ("outer:PartitionedCall", 0, 10),
        ("inner:MatMul", 2, 4),
        ("ExecutorState::Process", 0, 20),
        ("later:_MklMatMul", 12, 3),
    ]
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    line = plane.lines.add(name="tf_Compute")
    for i, (name, start_us, duration_us) in enumerate(events, 1):
        plane.event_metadata[i].name = name
        line.events.add(
            metadata_id=i,
            offset_ps=start_us * 10**6,
            duration_ps=duration_us * 10**6,
        )
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(space.SerializeToString())
    devices = {"outer": "/device:CPU:0", "inner": "/device:CPU:1"}

    rows = profile.op_rows(str(path), devices)

    assert [tuple(row) for row in rows] == [
        ("/device:CPU:0", "PartitionedCall", 1, 6.0, 6 / 13),
        ("/device:CPU:1", "MatMul", 1, 4.0, 4 / 13),
        (profile.OUTSIDE, "MatMul", 1, 3.0, 3 / 13),
    ]
    assert profile.top_lines(rows, 1) == [
        "  PartitionedCall on /device:CPU:0: 1 run(s), 6us, 46.15%"
    ]


def test_clear_train_dir_removes_the_profiles_and_names_them(tmp_path, capsys):
    for run in ("2026_11_26_02_19_34", "2026_11_26_02_20_01"):
        folder = tmp_path / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        (folder / "host.xplane.pb").write_bytes(b"x")
        (folder / "op_profile.txt").write_bytes(b"x")

    train_dirs.clear(str(tmp_path))

    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().out == (
        "--clear_train_dir: removed 0 checkpoint(s), 0 event file(s), 0 "
        "other file(s) and the profiles' folder plugins/ (2 profile(s)) from "
        "%s\n" % tmp_path
    )


def test_clear_train_dir_refuses_a_plugins_folder_holding_other_files(
    tmp_path,
):
    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    (folder / "host.xplane.pb").write_bytes(b"x")
    (folder / "notes.txt").write_bytes(b"mine")

    with pytest.raises(ValueError, match=r"\(plugins/\)"):
        train_dirs.clear(str(tmp_path))

    assert (folder / "notes.txt").read_bytes() == b"mine"


@pytest.mark.slow
def test_two_towers_steps_2_to_3_are_profiled_with_both_towers_ops(
    cifar10_data_dir, tmp_path
):
    result = run_script(
        "cifar10_multi_gpu_train.py",
        *trainer_flags(cifar10_data_dir, tmp_path, "--max_steps=4"),
        "--num_gpus=2",
        "--cpu_towers",
        "--profile_steps=2,3",
    )

    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    lines = profile_lines(result)
    assert lines[0] == (
        "Profile of steps 2 to 3 (--profile_steps=2,3): %s; its ops by their "
        "own time in op_profile.txt, top 5:" % run
    )
    assert lines[-1] == tab_line(tmp_path)
    table = (run / "op_profile.txt").read_text()
    assert table.splitlines()[0] == (
        "Ops of steps 2 to 3 by their own time, per device, from %s"
        % next(run.glob("*.xplane.pb")).name
    )
    rows = table_rows(table)
    # Each tower's device ran its 2 convolutions' filter gradients in each
    # of the 2 steps; the one update of the 10 variables ran on CPU:0.
    cpu = "/job:localhost/replica:0/task:0/device:CPU:%d"
    conv_filter = "Conv2DBackpropFilter"
    assert [rows[cpu % i, conv_filter][0] for i in (0, 1)] == [4, 4]
    assert rows[cpu % 0, "ResourceApplyGradientDescent"][0] == 20
    assert (cpu % 1, "ResourceApplyGradientDescent") not in rows
    shares = [float(share[:-1]) for _, _, share in rows.values()]
    assert sum(shares) == pytest.approx(100, abs=0.01 * len(shares))
    # The report's top lines are the table's 5 rows of most own time.
    share_of = {
        "  %s on %s: %d run(s), %s, %s" % (op_type, device, *values): float(
            values[2][:-1]
        )
        for (device, op_type), values in rows.items()
    }
    top = [share_of[line] for line in lines[1:-1]]
    assert len(top) == 5 and top == sorted(top, reverse=True)
    assert top[-1] >= sorted(share_of.values())[-6]
    steps, scopes = profiled(run)
    assert steps == [2, 3]
    # Each tower's convolution gradients, and the one update of the
    # variables.
    assert {"towers/tower_0", "towers/tower_1"} <= scopes[
        "Conv2DBackpropFilter"
    ]
    assert len(scopes["ResourceApplyGradientDescent"]) == 1


@pytest.mark.slow
def test_a_resumed_run_profiles_its_part_of_the_range_by_global_step(
    cifar10_data_dir, tmp_path
):
    flags = trainer_flags(cifar10_data_dir, tmp_path)
    first = run_script(
        "cifar10_train.py", *flags, "--max_steps=3", "--profile_steps=5,6"
    )
    assert profile_line(first) == (
        "--profile_steps=5,6: nothing was profiled: this run trained steps "
        "1 to 3."
    )
    assert not (tmp_path / "plugins").exists()

    resumed = run_script(
        "cifar10_train.py", *flags, "--max_steps=5", "--profile_steps=2,6"
    )

    (run,) = (tmp_path / "plugins" / "profile").iterdir()
    assert profile_line(resumed) == (
        "Profile of steps 4 to 5 (--profile_steps=2,6; this run started "
        "after step 3; the run ended at step 5): %s; its ops by their own "
        "time in op_profile.txt, top 5:" % run
    )
    assert profiled(run)[0] == [4, 5]


@pytest.mark.slow
def test_the_mnist_trainer_profiles_its_step_2(tmp_path):
    mnist_data.write_fake_data(str(tmp_path / "data"))

    result = run_script(
        "mnist_multi_gpu_train.py",
        "--data_dir=%s" % (tmp_path / "data"),
        "--train_dir=%s" % (tmp_path / "train"),
        "--num_epochs=1",
        "--batch_size=1000",
        "--profile_steps=2,2",
    )

    (run,) = (tmp_path / "train" / "plugins" / "profile").iterdir()
    assert profile_line(result).startswith("Profile of steps 2 to 2 ")
    steps, scopes = profiled(run)
    assert steps == [2]
    assert "towers/tower_0" in scopes["Conv2DBackpropFilter"]
