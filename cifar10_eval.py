"""Evaluates CIFAR-10 checkpoints: precision @ 1 and recall @ 5.

Run it beside a trainer, or once on its newest checkpoint:
  python cifar10_eval.py --checkpoint_dir=/tmp/cifar10_train
  python cifar10_eval.py --run_once --fake_data   # after a --fake_data run
  python cifar10_eval.py --run_once --model=resnet20   # the trainer's --model
  tensorboard --logdir=/tmp/cifar10_train   # the training and its eval

Its event logs go to CHECKPOINT_DIR/eval unless --eval_dir says otherwise.

Each new checkpoint is scored once: its moving-average (shadow) variables are
restored into the model, exactly --num_examples examples are classified, and
`Precision @ 1` and `Recall @ 5` (the label among the 5 highest logits, as
the Inception eval reports it) are written at the checkpoint's global step.
Only checkpoints that read in full are scored; one that the trainer deletes
before it is restored is skipped with a warning.
--last_step ends the watch once the trainer's last checkpoint is scored.
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import datetime
import os
import sys
import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from absl import flags

import cifar10
import cifar10_input
from cifar10_models import registry
from data_sets import cifar10_batches, cifar10_data
from multigpu import errors, folders
from multigpu.flags import choices, common_flags, script
from multigpu.graph import op_kernels, placement, summaries
from multigpu.train_dir import checkpoints, event_files, restore, train_dirs

# Seconds between the watching eval's lines saying what it waits for.
WAITING_LINE_SECS = 600


class Watch(NamedTuple):
    """Which checkpoints are scored, and when."""

    run_once: bool  # Score the newest and return (ValueError if none).
    interval_secs: int
    last_step: int  # Return once this global step or later is scored; 0 never.


class Scoring(NamedTuple):
    """The eval graph's ops that score a checkpoint."""

    # bool [2, <= batch_size], whether each example's label is the top
    # prediction (row 0) or among the top 5 (row 1): `summaries.top_k_hits`.
    hits: tf.Tensor
    init_op: tf.Operation  # Rewinds the input to its first example.
    summary_op: tf.Tensor


FLAGS = flags.FLAGS
flags.DEFINE_string(
    "eval_dir",
    "",
    "Where to write event logs. Default: the folder eval in "
    "--checkpoint_dir, so that TensorBoard on --checkpoint_dir shows the "
    "training and its eval side by side.",
)
flags.DEFINE_enum("eval_data", "test", ["test", "train"], "Split to evaluate.")
flags.DEFINE_string(
    "checkpoint_dir",
    "",
    "Where the trainer writes checkpoints, the trainer's --train_dir. "
    "Default: the "
    "trainers' default for --model: %s for --model=tutorial, %s_MODEL for "
    "another." % (cifar10_input.TRAIN_DIR, cifar10_input.TRAIN_DIR),
)
flags.DEFINE_integer(
    "eval_interval_secs",
    300,
    "Seconds between looks for a new checkpoint.",
    lower_bound=1,
)
flags.DEFINE_integer(
    "num_examples", 10000, "Examples to evaluate.", lower_bound=1
)
flags.DEFINE_boolean("run_once", False, "Score the newest checkpoint and exit.")
flags.DEFINE_integer(
    "last_step",
    0,
    "Exit once a checkpoint of this global step or later is scored, e.g. the "
    "trainer's --max_steps; 0 waits for new checkpoints forever.",
    lower_bound=0,
)
common_flags.define_fake_data_flag()
common_flags.define_session_flags()
common_flags.define_model_flag()
# The trainers' --force_cpu_bfloat16, to evaluate in the dtype they trained in.
common_flags.define_force_cpu_bfloat16_flag()
flags.adopt_module_key_flags(common_flags)
# --batch_size, --data_dir and --use_fp16 are the tutorial's, in cifar10.
flags.adopt_module_key_flags(cifar10)
# The eval has no towers: its --help says what the batch is here.
FLAGS["batch_size"].help = "Examples classified per step."


def build_graph(
    *,
    eval_data,
    data_dir,
    batch_size,
    num_examples,
    compute_dtype=tf.float32,
    model=registry.TUTORIAL,
):
    """Builds the eval input, the model (is_training=False: batch norm on
    its moving statistics) and the `hits` and `init_op` of `Scoring`."""
    with tf.device("/cpu:0"):
        images, labels, init_op = cifar10_batches.eval_inputs(
            eval_data, data_dir, batch_size, num_examples
        )
    logits = registry.logits(model, images, False, compute_dtype)
    return summaries.top_k_hits(logits, labels), init_op


def eval_once(checkpoint, saver, event_file, scoring, config):
    """Scores one checkpoint on every example of the input, once; returns
    its global step (int), or None when it went away before it was restored.
    saver restores the shadow variables into the model's variables.
    """
    with tf.compat.v1.Session(config=config) as sess:
        global_step = _restore(sess, saver, checkpoint)
        if global_step is None:
            return None
        print("%s: evaluating %s" % (datetime.datetime.now(), checkpoint))
        # The model's summaries come from the first batch.
        sess.run(scoring.init_op)
        batch_hits, summary_bytes = sess.run([scoring.hits, scoring.summary_op])
        counts, examples = np.sum(batch_hits, axis=1), batch_hits.shape[1]
        try:
            while True:
                batch_hits = sess.run(scoring.hits)
                errors.raise_if_signalled()
                counts += np.sum(batch_hits, axis=1)
                examples += batch_hits.shape[1]
        except tf.errors.OutOfRangeError:
            pass
    summary = tf.compat.v1.Summary.FromString(summary_bytes)
    precision, recall = counts / examples
    print("%s: precision @ 1 = %.3f" % (datetime.datetime.now(), precision))
    print("%s: recall @ 5 = %.3f" % (datetime.datetime.now(), recall))
    summary.value.add(tag="Precision @ 1", simple_value=precision)
    summary.value.add(tag="Recall @ 5", simple_value=recall)
    event_file.write_summary(summary, global_step)
    return global_step


def _restore(sess, saver, checkpoint):
    try:
        saver.restore(sess, checkpoint)
        # Its own step: a checkpoint's name need not end in -STEP.
        return checkpoints.global_step(checkpoint)
    except (ValueError, tf.errors.NotFoundError, tf.errors.DataLossError) as e:
        # The trainer deletes its oldest checkpoints (max_to_keep), the
        # index file first, so one may go between being chosen and being
        # opened.
        if tf.io.gfile.exists(checkpoint + ".index"):
            raise
        print(
            "WARNING: skipping checkpoint %s, it went away (%s: %s)"
            % (checkpoint, type(e).__name__, str(e).split("\n")[0]),
            file=sys.stderr,
        )
        return None


def evaluate(checkpoint_dir, eval_dir, watch, config=None, **data):
    """Scores the checkpoints of checkpoint_dir that watch names, into
    event logs in eval_dir; **data: `build_graph`'s arguments."""
    config = config or placement.session_config()
    with tf.Graph().as_default():
        hits, init_op = build_graph(**data)
        op_kernels.refuse_bfloat16_without_cpu_kernel(
            tf.compat.v1.get_default_graph(), data["compute_dtype"]
        )
        saver = restore.Restorer(cifar10.variables_to_restore())
        summary_op = tf.compat.v1.summary.merge_all()
        if summary_op is None:  # A model without summaries (the ResNets).
            summary_op = tf.constant(b"")
        scoring = Scoring(hits, init_op, summary_op)
        # No graph: TensorBoard shows the trainer's, one per run.
        event_file = event_files.EventFile(event_files.open_writer(eval_dir))
        last_scored, scored_step, said_at = None, None, None
        while True:
            errors.raise_if_signalled()
            checkpoint = _newest_checkpoint(checkpoint_dir, watch.run_once)
            if checkpoint is not None and checkpoint != last_scored:
                with cifar10_batches.reading(data["data_dir"]):
                    step = eval_once(
                        checkpoint, saver, event_file, scoring, config
                    )
                last_scored, said_at = checkpoint, None
                if step is not None:
                    scored_step = step
                    if 0 < watch.last_step <= scored_step:
                        return
            if watch.run_once:
                return
            said_at = _say_waiting(checkpoint_dir, scored_step, said_at)
            time.sleep(watch.interval_secs)


def _say_waiting(checkpoint_dir, scored_step, said_at):
    """Says what the eval waits for, once per WAITING_LINE_SECS at most;
    returns the `time.monotonic()` of the last line said."""
    now = time.monotonic()
    if said_at is not None and now - said_at < WAITING_LINE_SECS:
        return said_at
    newer = "" if scored_step is None else " newer than step %d" % scored_step
    print(
        "%s: waiting for a checkpoint%s in %s"
        % (datetime.datetime.now(), newer, checkpoint_dir),
        flush=True,
    )
    return now


def _newest_checkpoint(checkpoint_dir, run_once):
    """The newest checkpoint that reads, or None; with run_once, an error
    when there is none or none reads."""
    try:
        checkpoint = checkpoints.newest_valid_checkpoint(checkpoint_dir)
    except errors.TrainingError as e:
        if run_once:
            raise
        # Maybe the trainer deleted them while they were read.
        print("WARNING: %s; waiting." % e, file=sys.stderr)
        return None
    if checkpoint is None and run_once:
        raise ValueError(
            "no checkpoint found in --checkpoint_dir=%s" % checkpoint_dir
        )
    return checkpoint


def _refuse_checkpoint_file(checkpoint_dir):
    """Refuses a --checkpoint_dir that names a file or a checkpoint's
    path prefix, in which the eval would wait forever for a checkpoint."""
    if os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir):
        raise ValueError(
            "--checkpoint_dir=%s is a file, not a folder; pass the folder of "
            "the checkpoints, the trainer's --train_dir" % checkpoint_dir
        )
    if os.path.exists(checkpoint_dir) or not (
        os.path.exists(checkpoint_dir + ".index")
        or os.path.basename(checkpoint_dir).startswith(
            checkpoints.CHECKPOINT_BASENAME
        )
    ):
        return
    raise ValueError(
        "--checkpoint_dir=%s is a checkpoint, not a folder; pass its folder, "
        "--checkpoint_dir=%s: the eval scores the newest checkpoint there "
        "(and, without --run_once, each new one)"
        % (checkpoint_dir, os.path.dirname(checkpoint_dir) or ".")
    )


def main(argv):
    del argv
    choices.check_flags(FLAGS)
    model = registry.model(FLAGS.model)
    checkpoint_dir = FLAGS.checkpoint_dir or registry.default_train_dir(
        model.name
    )
    _refuse_checkpoint_file(checkpoint_dir)
    registry.refuse_other_model(model, checkpoint_dir, "checkpoint_dir")
    eval_dir = FLAGS.eval_dir or os.path.join(
        checkpoint_dir, train_dirs.EVAL_FOLDER
    )
    config = placement.session_config(
        options=choices.session_options_from_flags(FLAGS)
    )
    if FLAGS.fake_data:
        cifar10_data.prepare_data_dir(FLAGS.data_dir, fake_data=True)
    else:
        cifar10_data.say_if_sample_set(FLAGS.data_dir)
    train_dirs.refuse_other_data_set(
        checkpoint_dir, cifar10_data.description(FLAGS.data_dir), FLAGS.data_dir
    )
    folders.make_folder(eval_dir, "eval_dir")
    devices = placement.tower_devices(1, cpu_towers=True)
    data = dict(
        eval_data=FLAGS.eval_data,
        data_dir=FLAGS.data_dir,
        batch_size=FLAGS.batch_size,
        num_examples=FLAGS.num_examples,
        compute_dtype=placement.compute_dtype(
            FLAGS.use_fp16, devices, FLAGS.force_cpu_bfloat16
        ),
        model=model,
    )
    watch = Watch(FLAGS.run_once, FLAGS.eval_interval_secs, FLAGS.last_step)
    try:
        with errors.raising():
            evaluate(checkpoint_dir, eval_dir, watch, config, **data)
    except errors.Signalled as e:
        raise errors.Interrupted(
            "interrupted (%s); the eval saves nothing, its scores so far "
            "are in %s" % (e.name, eval_dir),
            e.exit_code,
        ) from None


def run():
    script.run_script(main)


if __name__ == "__main__":
    run()
