"""The profile's op table as text: ops by their own time, per device.

The profiler's trace (HOST.xplane.pb) is what TensorBoard's Profile tab
draws, and the tab needs internet for its charts. This reads the same
trace with TensorFlow's own protobuf and writes the table TF1's `tfprof`
printed in its op view: per device, each op type with how many times it
ran, its own time (an op's span on its thread, less the ops run inside
it) and its share of all the ops' time, the most expensive first.

The trace names each op 'NAME:TYPE' but not its device: that comes from
the session's partition graphs (`RunMetadata.partition_graphs`), which
place every node the step ran. Ops run outside them (tf.data's functions
on their own threads) are counted under `OUTSIDE`. The times are the
host's: on a GPU an op's host span is its launch, and the Profile tab has
its kernels' times.
"""

import collections
import re

from tensorflow.tsl.profiler.protobuf import xplane_pb2

# The table's file, beside the profile's HOST.xplane.pb.
FILE_NAME = "op_profile.txt"
# The 'device' of the ops that no partition graph holds.
OUTSIDE = "host threads outside the step's graph (tf.data, functions)"
# An op's event in the trace: 'NAME:TYPE'.
_OP_EVENT = re.compile(r"^([^:]+):([A-Za-z_][A-Za-z0-9_]*)$")
# The prefix of oneDNN's kernels' types (_MklNativeConv2DBackpropFilter on
# a CPU with AVX-512), dropped so that a row names its op as a graph does
# on any CPU.
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
    """The ops of a trace by own time, per device.

    Args:
      xplane_path: str, the profiler's HOST.xplane.pb.
      devices: {node name: device}, from `node_devices`.

    Returns:
      list of `Row`, most own time first: micros a float, share the
      fraction (0 to 1) of all the ops' own time.
    """
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
    """An op's type from its event's: 'Conv2DBackpropFilter' for oneDNN's
    '_MklNativeConv2DBackpropFilter', the same for any other."""
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
    """The table, one block per device, as lines of text.

    Args:
      rows: from `op_rows`.
      title: str, the first line.
    """
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
    """The first count rows, one line each, for the closing report."""
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
