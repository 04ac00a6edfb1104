"""--profile_steps=A,B: steps A to B under TensorFlow's public profiler.

The profile (TRAIN_DIR/plugins/profile/RUN/HOST.xplane.pb) is what
TensorBoard's Profile tab reads (the `tensorboard-plugin-profile` package);
each profiled step is marked with its global step. The tab's charts load
from the internet, so beside the trace goes op_profile.txt, the table TF1's
`tfprof` printed in its op view: per device, each op type by its own time
(its span on its thread, less the ops run inside it), most first.

The trace names each op 'NAME:TYPE' but not its device: that comes from
the session's partition graphs. Ops run outside them (tf.data's functions)
are counted under `OUTSIDE`. The times are the host's: on a GPU an op's
host span is its launch.
"""

import collections
import importlib.util
import os
import re

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from multigpu import folders

# Under the logdir given to the profiler: its runs' folders.
PROFILE_FOLDER = os.path.join("plugins", "profile")
# The name of a profiled step's mark, with its global step ('step_num').
STEP_NAME = "train"
# How many of the op table's rows the closing report prints.
TOP_OPS = 5
# The package of TensorBoard's Profile tab, and how to install it.
PLUGIN_MODULE = "tensorboard_plugin_profile"
PLUGIN_INSTALL = 'pip install "tf1-multi-gpu[profile]"'


def parse_steps(value):
    """The (first, last) global steps of --profile_steps 'A,B' (or 'A');
    None for ''."""
    if not value:
        return None
    parts = value.split(",")
    if len(parts) in (1, 2) and all(part.strip().isdigit() for part in parts):
        first, last = int(parts[0]), int(parts[-1])
        if 1 <= first <= last:
            return first, last
    raise ValueError(
        "expected FIRST,LAST global steps with 1 <= FIRST <= LAST (e.g. "
        "--profile_steps=5,7; the first step of a new run is step 1), found "
        "%r" % value
    )


def profile_hooks(profile_steps, train_dir):
    """The hooks of --profile_steps: [] for '', else one `ProfileHook`; a
    train_dir it cannot write is a ValueError before step 1."""
    steps = parse_steps(profile_steps)
    if steps is None:
        return []
    why = folders.why_unwritable(os.path.join(train_dir, PROFILE_FOLDER))
    if why is not None:
        raise ValueError(
            "--profile_steps=%s writes its profile under --train_dir=%s, "
            "which %s; pass a --train_dir this process can write, or drop "
            "--profile_steps" % (profile_steps, train_dir, why)
        )
    return [ProfileHook(steps[0], steps[1], train_dir)]


def closing_lines(hooks, logdir):
    """The closing report's lines of `profile_hooks`' hooks."""
    return [line for hook in hooks for line in hook.report_lines(logdir)]


class ProfileHook(tf.compat.v1.train.SessionRunHook):
    """Profiles the runs that make global steps first to last.

    The profiler starts before the first run of the range this run reaches
    (a resumed run may start inside it) and stops after step last, or when
    the run ends. Steps are read from the global step after each run.
    """

    def __init__(self, first, last, train_dir):
        self.first, self.last = first, last
        self._train_dir = train_dir
        self._start_step = self._end_step = self._next_step = None
        self._profiled = []
        self._trace = None
        self._runs_before = None
        self._devices = {}
        self._top_lines = []
        self.path = None

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session, coord):
        self._start_step = session.run(self._global_step)
        self._end_step = self._start_step
        self._next_step = self._start_step + 1

    def before_run(self, run_context):
        if self.first <= self._next_step <= self.last:
            if self._runs_before is None:
                self._runs_before = _profile_runs(self._train_dir)
                tf.profiler.experimental.start(self._train_dir)
            self._trace = tf.profiler.experimental.Trace(
                STEP_NAME, step_num=self._next_step, _r=1
            )
            self._trace.__enter__()
            # Where each node ran, for the op table's devices.
            return tf.compat.v1.train.SessionRunArgs(
                None,
                options=tf.compat.v1.RunOptions(output_partition_graphs=True),
            )
        return None

    def after_run(self, run_context, run_values):
        if self._trace is not None:
            self._trace.__exit__(None, None, None)
            self._trace = None
            self._devices.update(node_devices(run_values.run_metadata))
            self._profiled.append(self._next_step)
            if self._next_step == self.last:
                self._stop()
        self._end_step = run_context.session.run(self._global_step)
        self._next_step = self._end_step + 1

    def end(self, session):
        self._stop()

    def _stop(self):
        if self._runs_before is None or self.path is not None:
            return
        tf.profiler.experimental.stop()
        added = sorted(_profile_runs(self._train_dir) - self._runs_before)
        self.path = os.path.join(
            self._train_dir, PROFILE_FOLDER, added[-1] if added else ""
        )
        self._write_op_table()

    def _write_op_table(self):
        traces = [
            name
            for name in os.listdir(self.path)
            if name.endswith(".xplane.pb")
        ]
        rows = [
            row
            for trace in traces
            for row in op_rows(os.path.join(self.path, trace), self._devices)
        ]
        title = (
            "Ops of steps %d to %d by their own time, per device, from %s"
            % (
                self._profiled[0],
                self._profiled[-1],
                ", ".join(traces),
            )
        )
        with open(os.path.join(self.path, FILE_NAME), "w") as f:
            f.write(table_text(rows, title))
        self._top_lines = top_lines(rows, TOP_OPS)

    def report_lines(self, tensorboard_logdir):
        wanted = "--profile_steps=%d,%d" % (self.first, self.last)
        if not self._profiled:
            return [
                "%s: nothing was profiled: this run trained steps %d to %d."
                % (wanted, self._start_step + 1, self._end_step)
            ]
        if self._profiled[0] > self.first:
            wanted += "; this run started after step %d" % self._start_step
        if self._profiled[-1] < self.last:
            wanted += "; the run ended at step %d" % self._end_step
        line = (
            "Profile of steps %d to %d (%s): %s; its ops by their own time "
            "in %s, top %d:"
            % (
                self._profiled[0],
                self._profiled[-1],
                wanted,
                self.path,
                FILE_NAME,
                len(self._top_lines),
            )
        )
        tab = (
            "The whole profile: tensorboard --logdir=%s, then its Profile "
            "tab, whose charts load from the internet" % tensorboard_logdir
        )
        if importlib.util.find_spec(PLUGIN_MODULE) is None:
            tab += " (the tab needs the plugin: %s)" % PLUGIN_INSTALL
        return [line, *self._top_lines, tab + "."]


def _profile_runs(train_dir):
    try:
        return set(os.listdir(os.path.join(train_dir, PROFILE_FOLDER)))
    except FileNotFoundError:
        return set()


FILE_NAME = "op_profile.txt"
OUTSIDE = "host threads outside the step's graph (tf.data, functions)"
# An op's event in the trace: 'NAME:TYPE'.
_OP_EVENT = re.compile(r"^([^:]+):([A-Za-z_][A-Za-z0-9_]*)$")
# oneDNN's kernels' prefix (_MklNativeConv2DBackpropFilter on a CPU with
# AVX-512), dropped so that a row names its op as a graph does on any CPU.
_ONEDNN_PREFIX = re.compile(r"^_Mkl(Native)?")

Row = collections.namedtuple("Row", "device op_type count micros share")


def node_devices(run_metadata):
    """{node name: device} of the partition graphs of a `RunMetadata`."""
    return {
        node.name: node.device
        for graph in run_metadata.partition_graphs
        for node in graph.node
    }


def op_rows(xplane_path, devices):
    """The `Row`s of a trace's ops by own time, per device (devices:
    `node_devices`), most first: share the fraction of all the ops'."""
    with open(xplane_path, "rb") as f:
        space = xplane_pb2.XSpace.FromString(f.read())
    counts, micros = collections.Counter(), collections.Counter()
    for plane in space.planes:
        names = {key: each.name for key, each in plane.event_metadata.items()}
        for line in plane.lines:
            for name, own_ps in _own_times(line, names):
                node, op_type = _OP_EVENT.match(name).groups()
                key = devices.get(node, OUTSIDE), op_type_of(op_type)
                counts[key] += 1
                micros[key] += own_ps / 1e6
    total = sum(micros.values()) or 1.0
    return [
        Row(device, op_type, counts[device, op_type], us, us / total)
        for (device, op_type), us in micros.most_common()
    ]


def op_type_of(kernel_type):
    return _ONEDNN_PREFIX.sub("", kernel_type)


def _own_times(line, names):
    """(name, own picoseconds) of each op event of a thread's line."""
    events = sorted(
        (event.offset_ps, -event.duration_ps, names[event.metadata_id])
        for event in line.events
        if _OP_EVENT.match(names[event.metadata_id])
    )
    own, open_events = [], []  # open_events: (end, index into own).
    for start, minus_duration, name in events:
        while open_events and open_events[-1][0] <= start:
            open_events.pop()
        if open_events:
            # Run inside the enclosing op: not that op's own time.
            own[open_events[-1][1]][1] += minus_duration
        own.append([name, -minus_duration])
        open_events.append((start - minus_duration, len(own) - 1))
    return own


def table_text(rows, title):
    """The table of `op_rows`' rows, one block per device."""
    lines = [title]
    for device in dict.fromkeys(row.device for row in rows):
        mine = [row for row in rows if row.device == device]
        lines += [
            "",
            "%s: %s own time in %d op runs, %.2f%% of the ops' time"
            % (
                device,
                _duration(sum(row.micros for row in mine)),
                sum(row.count for row in mine),
                100 * sum(row.share for row in mine),
            ),
            "%-36s %8s %12s %8s" % ("op type", "count", "total", "share"),
        ]
        lines += [
            "%-36s %8d %12s %7.2f%%"
            % (row.op_type, row.count, _duration(row.micros), 100 * row.share)
            for row in mine
        ]
    return "\n".join(lines) + "\n"


def top_lines(rows, count):
    return [
        "  %s on %s: %d run(s), %s, %.2f%%"
        % (
            row.op_type,
            row.device,
            row.count,
            _duration(row.micros),
            100 * row.share,
        )
        for row in rows[:count]
    ]


def _duration(micros):
    """'12.35ms' or '830us', as tfprof wrote times."""
    if micros >= 1000:
        return "%.2fms" % (micros / 1000)
    return "%dus" % round(micros)
