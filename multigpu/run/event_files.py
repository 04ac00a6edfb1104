"""The chief's event file: written whole, or the run stops and says why.

TensorFlow's event writer drops an event it cannot write without a word
and flushes its file every 120 s: a disk that fills and frees again leaves
an event file corrupt from that record on (TensorBoard reads nothing past
it), and the run ends with exit 0. Here the file is flushed after every
step, so the first failed write is seen at once; the file is cut back to
its last complete record, readable to the end, and the run stops.
"""

import contextlib
import os
import re
import shutil
import struct
import threading

import tensorflow as tf

# The start of an event file's name: events.out.tfevents.TIME.HOST.
EVENT_FILE_PREFIX = "events.out.tfevents."
# The writer's error: 'PATH; REASON' then '\tFailed to flush N events ...'.
_WRITE_ERROR = re.compile(r"^(.*events\.out\.tfevents\.[^;]*); ([^\n]+)")


class EventFileHook(tf.compat.v1.train.SessionRunHook):
    """Flushes the event file of train_dir after every step.

    A failed write raises the writer's `RuntimeError`, which `failure`
    turns into the run's error.
    """

    def __init__(self, train_dir):
        """train_dir: str, the folder of the event file (the summaries')."""
        self._train_dir = train_dir
        self._writer = None
        self._path = None
        self._complete_bytes = 0

    def begin(self):
        # The summary and checkpoint hooks write to this same writer.
        self._writer = tf.compat.v1.summary.FileWriterCache.get(self._train_dir)
        # A failed write ends the writer's thread with a traceback and an
        # error line of its own; the run's error says it once.
        threading.excepthook = _quiet_writer_thread(threading.excepthook)
        tf.get_logger().addFilter(
            lambda record: _THREAD_ERROR not in record.getMessage()
        )

    def after_run(self, run_context, run_values):
        self._writer.flush()
        # The writer opens its file at its first event; TensorFlow offers
        # no public name for it.
        path = self._writer.event_writer._ev_writer.FileName()
        if path != self._path:
            self._path, self._complete_bytes = path, 0
        end = _records_end(path, self._complete_bytes)
        if end is None:
            raise RuntimeError(
                "%s; a record was cut short while written (was the disk "
                "full?)" % path
            )
        self._complete_bytes = end

    def cut_back(self):
        """Cuts the event file back to its complete records, if any is cut.

        For a run that stops on an error: a record half written when the
        error struck would end TensorBoard's reading there. The writer is
        closed: nothing more is written to the file.
        """
        if self._writer is None:
            return
        path = self._writer.event_writer._ev_writer.FileName()
        # Closed first: its thread would go on writing at the old end.
        with contextlib.suppress(RuntimeError):
            self._writer.close()
        if not path or not os.path.exists(path):
            return
        if path != self._path:
            self._path, self._complete_bytes = path, 0
        end = _records_end(path, self._complete_bytes, whole_file=False)
        os.truncate(path, end)
        self._complete_bytes = end

    def failure(self, error):
        """What failed, once the event file is cut back to complete events.

        Args:
          error: a `RuntimeError` of the training loop.

        Returns:
          str, e.g. 'could not write the event file P (No space left on
          device; 0.0 MB free on its disk); it keeps every event written
          before'; None when error is not the event writer's.
        """
        found = _WRITE_ERROR.match(str(error))
        if found is None:
            return None
        return (
            "could not write the event file %s (%s; %.1f MB free on its "
            "disk); it keeps every event written before"
            % (
                found.group(1),
                found.group(2).strip(),
                shutil.disk_usage(self._train_dir).free / 2**20,
            )
        )


def writer_without_graph(train_dir):
    """Makes TensorFlow's shared writer of train_dir one without the graph.

    The hooks' writer (`FileWriterCache`) adds the graph when it is made,
    and the checkpoint saver adds it again: TensorBoard warned of more
    than one graph event per run. Made here first, the writer leaves the
    graph to the checkpoint saver alone, which adds it once per train_dir.

    Args:
      train_dir: str, the folder as the hooks are given it.
    """
    cache = tf.compat.v1.summary.FileWriterCache
    # TensorFlow offers no public way to put a writer in its cache.
    with cache._lock:
        if train_dir not in cache._cache:
            cache._cache[train_dir] = tf.compat.v1.summary.FileWriter(train_dir)


# The line TensorFlow logs when its event writer's thread fails.
_THREAD_ERROR = "EventFileWriter writer thread error"


def _quiet_writer_thread(excepthook):
    """threading.excepthook, silent for the event writer's failure."""

    def quiet(args):
        if not (
            args.thread is not None
            and args.thread.name == "EventLoggerThread"
            and issubclass(args.exc_type, RuntimeError)
        ):
            excepthook(args)

    return quiet


# A record of an event file: length (uint64), its CRC (4 bytes), the data,
# the data's CRC (4 bytes).
_LENGTH = struct.Struct("<Q")
_RECORD_BYTES = _LENGTH.size + 4 + 4


def _records_end(path, start, whole_file=True):
    """The end of the file's complete records from start on.

    Args:
      path: str, an event file.
      start: int, the offset of a record (the end of the checked ones).
      whole_file: bool, whether a record cut short makes the answer None.

    Returns:
      int, the end of the last record that is whole; with whole_file, None
      unless that is the file's end.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = start
        while offset < size:
            f.seek(offset)
            header = f.read(_LENGTH.size)
            if len(header) < _LENGTH.size:
                break
            (length,) = _LENGTH.unpack(header)
            if offset + _RECORD_BYTES + length > size:
                break
            offset += _RECORD_BYTES + length
    if whole_file and offset != size:
        return None
    return offset
