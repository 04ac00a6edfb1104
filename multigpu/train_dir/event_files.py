"""Event files: one per process, written whole, or the run stops and says why.

TensorFlow names an event file by the second and the host it starts on:
two processes that start in the same second in one folder (a trainer and
an eval, two evals) open one file and write over each other's records.
`open_writer` adds the process's id and a random token to the name.

TensorFlow's event writer drops an event it cannot write without a word:
a disk that fills and frees again leaves the file corrupt from that record
on, and the run ends with exit 0. Here the file is flushed after every step
and read back, so the first failed write (or another process's record)
stops the run, the file cut back to its last complete record.
"""

import contextlib
import os
import re
import secrets
import shutil
import threading
import time

import tensorflow as tf
from tensorflow.python.lib.io import tf_record

from multigpu import errors

# The start of an event file's name: events.out.tfevents.TIME.HOST.
EVENT_FILE_PREFIX = "events.out.tfevents."
# The writer's error: 'PATH; REASON' then '\tFailed to flush N events ...'.
_WRITE_ERROR = re.compile(r"^(.*events\.out\.tfevents\.[^;]*); ([^\n]+)")


def open_writer(logdir, graph=None):
    """A `FileWriter` of logdir whose file no other process can name:
    events.out.tfevents.SECONDS.HOST.PID.TOKEN (TOKEN, 8 random hex digits,
    for a pid used again on another host or later)."""
    suffix = ".%d.%s" % (os.getpid(), secrets.token_hex(4))
    try:
        return _MainGraphWriter(logdir, graph, filename_suffix=suffix)
    except RuntimeError as e:
        found = _WRITE_ERROR.match(str(e))
        if found is None:
            raise
        with contextlib.suppress(OSError):
            os.remove(found.group(1))
        raise errors.TrainingError(
            _write_failure(found, logdir, "nothing is left of it")
        ) from None


def _write_failure(found, folder, left):
    return (
        "could not write the event file %s (%s; %.1f MB free on its disk); %s"
        % (
            found.group(1),
            found.group(2).strip(),
            shutil.disk_usage(folder).free / 2**20,
            left,
        )
    )


class _MainGraphWriter(tf.compat.v1.summary.FileWriter):
    """A `FileWriter` whose graph leaves out the graph's function library.

    TensorBoard's Graphs page draws each function of the library (the
    bodies of tf.data's maps and of the conds: 39 in the one-device
    trainer) as a box beside the main graph and fits the whole to the
    page, which left the main graph small in a corner. It counts the
    events it is given (`events_added`): a step that added none needs no
    flush, which waits for the writer's thread.
    """

    events_added = 0

    def add_event(self, event):
        self.events_added += 1
        super().add_event(event)

    def _add_event(self, event, step):
        # Summaries, session logs and meta graphs come this way.
        self.events_added += 1
        super()._add_event(event, step)

    def add_graph(self, graph, global_step=None, graph_def=None):
        del graph_def
        main_graph = graph.as_graph_def(add_shapes=True)
        main_graph.ClearField("library")
        event = tf.compat.v1.Event(
            wall_time=time.time(), graph_def=main_graph.SerializeToString()
        )
        if global_step is not None:
            event.step = int(global_step)
        self.add_event(event)


def own_writer(logdir):
    """Makes the shared writer of logdir one of `open_writer`'s, graphless.

    The hooks of a `MonitoredSession` write through the writer
    `FileWriterCache` keeps per folder, which would name its file by second
    and host only, and add the graph that the checkpoint saver adds again
    (TensorBoard warned of two graph events). Call it before the hooks
    begin.
    """
    writer = open_writer(logdir)
    cache = tf.compat.v1.summary.FileWriterCache
    # TensorFlow offers no public way to hand the cache a writer.
    with cache._lock:
        replaced = cache._cache.get(logdir)
        cache._cache[logdir] = writer
    if replaced is not None:
        with contextlib.suppress(RuntimeError):
            replaced.close()


class ForeignWriter(RuntimeError):
    """The event file holds bytes that are not its writer's records."""


class EventFile:
    def __init__(self, writer):
        self.writer = writer
        self.path = None
        self.end = 0  # The end of the file's records read back whole.
        self._inode = None
        self._head = None
        self._seen = None  # (inode, size, mtime) at the last reading
        self._flushed = 0  # The writer's events_added at the last flush.
        self._foreign = False
        _quiet_writer_thread()

    def flush(self):
        """Flushes the events the writer was given since the last flush."""
        added = self.writer.events_added
        if added != self._flushed:
            self.writer.flush()
            self._flushed = added

    def check(self):
        """Reads back the records the writer flushed since the last check:
        how many. ForeignWriter when another process wrote, replaced or cut
        the file; RuntimeError('PATH; REASON') when a record was cut short
        or the file is missing."""
        # The writer opens its file at its first event; TensorFlow offers
        # no public name for it.
        path = self.writer.event_writer._ev_writer.FileName()
        if path != self.path:
            self.path, self.end, self._inode, self._head = path, 0, None, None
            self._seen = None
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            raise RuntimeError("%s; the file is missing" % path) from None
        # Any write, ours or another's, moves the size or the time of the
        # last change: an unchanged file needs no reading (most steps).
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return 0
        end, count, error = _read_records(path, self.end)
        foreign = self._foreign_sign(path, stat, end, error)
        if foreign is not None:
            self._foreign = True
            raise ForeignWriter(
                "another process writes into the event file %s (%s)"
                % (path, foreign)
            )
        if end != os.path.getsize(path):
            raise RuntimeError(
                "%s; a record was cut short while written (was the disk "
                "full?)" % path
            )
        self.end = end
        self._head = self._head or _first_record(path)
        self._seen = seen
        return count

    def _foreign_sign(self, path, stat, end, error):
        """Why the file seems written by another process too, or None: one
        opens it afresh (cut to 0 bytes) and writes its own first record.
        stat: the file's `os.stat` before its records were read."""
        self._inode = self._inode or stat.st_ino
        if stat.st_ino != self._inode:
            return "it was replaced"
        if stat.st_size < self.end:
            return "it was cut to %d bytes, from %d" % (stat.st_size, self.end)
        if self._head is not None and _first_record(path) != self._head:
            return "its first record is another writer's"
        if error is not None and "corrupted" in error:
            return (
                "the record at byte %d is another writer's: its checksum "
                "fails" % end
            )
        return None

    def write_summary(self, summary, step):
        """Writes summary at step and reads it back: TrainingError when it
        is not there whole."""
        self.writer.add_summary(summary, step)
        try:
            self.flush()
            if self.check():
                return
            reason = "no record reached the file"
        except ForeignWriter as e:
            raise errors.TrainingError(str(e)) from None
        except RuntimeError as e:
            reason = str(e).split("; ", 1)[-1].split("\n")[0]
        self.cut_back()
        folder = self.writer.get_logdir()
        if not os.path.isdir(folder):
            raise errors.TrainingError(
                "could not write the summary of step %d to the event file %s: "
                "its folder went away (deleted or moved, as a trainer's "
                "--clear_train_dir deletes it); run again to write a new one"
                % (step, self.path)
            )
        free = shutil.disk_usage(folder).free / 2**20
        raise errors.TrainingError(
            "could not write the summary of step %d to the event file %s: "
            "%s; %.1f MB free on its disk; the file keeps the %d bytes of "
            "events before" % (step, self.path, reason, free, self.end)
        )

    def cut_back(self):
        """Closes the writer; cuts its file back to its whole records, for a
        run that stops on an error (unless another process writes it)."""
        path = self.writer.event_writer._ev_writer.FileName()
        # Closed first: its thread would go on writing at the old end.
        with contextlib.suppress(RuntimeError):
            self.writer.close()
        if self._foreign or not path or not os.path.exists(path):
            return
        if path != self.path:
            self.path, self.end = path, 0
        self.end = _read_records(path, self.end)[0]
        os.truncate(path, self.end)


class EventFileHook(tf.compat.v1.train.SessionRunHook):
    """Flushes the event file of train_dir after every step that added an
    event, and checks it after every step."""

    def __init__(self, train_dir):
        self._train_dir = train_dir
        self._file = None

    def begin(self):
        self._file = EventFile(
            tf.compat.v1.summary.FileWriterCache.get(self._train_dir)
        )

    def after_run(self, run_context, run_values):
        self._file.flush()
        self._file.check()

    def cut_back(self):
        if self._file is not None:
            self._file.cut_back()

    def failure(self, error):
        """The run's error line for error (a `RuntimeError` of the loop);
        None when it is not the event writer's."""
        if isinstance(error, ForeignWriter):
            return str(error)
        found = _WRITE_ERROR.match(str(error))
        if found is None:
            return None
        return _write_failure(
            found, self._train_dir, "it keeps every event written before"
        )


# The line TensorFlow logs when its event writer's thread fails.
_THREAD_ERROR = "EventFileWriter writer thread error"


def _quiet_writer_thread():
    """Silences the event writer thread's traceback and error line, once
    per process: the process's error says it once."""
    if getattr(threading.excepthook, "quiet_writer_thread", False):
        return
    excepthook = threading.excepthook

    def quiet(args):
        if not (
            args.thread is not None
            and args.thread.name == "EventLoggerThread"
            and issubclass(args.exc_type, RuntimeError)
        ):
            excepthook(args)

    quiet.quiet_writer_thread = True
    threading.excepthook = quiet
    tf.get_logger().addFilter(
        lambda record: _THREAD_ERROR not in record.getMessage()
    )


def _read_records(path, start):
    """Reads and checks an event file's records from offset start on:
    (end of the last whole record, how many, None or the reader's message
    for the record at end, e.g. 'corrupted record at N')."""
    reader = tf_record.tf_record_random_reader(path)
    end, count = start, 0
    while True:
        try:
            _, end_of_next = reader.read(end)
        except IndexError:
            return end, count, None
        except tf.errors.DataLossError as e:
            return end, count, e.message
        end, count = end_of_next, count + 1


def _first_record(path):
    try:
        return tf_record.tf_record_random_reader(path).read(0)[0]
    except (IndexError, tf.errors.DataLossError):
        return None
