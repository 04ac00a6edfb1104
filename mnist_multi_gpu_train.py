"""Trains the MNIST convolutional model on several GPUs: one tower per GPU.

Run it:
  python mnist_input.py --idx_dir=/tmp/mnist_idx \\
      --data_dir=/tmp/mnist_data                             # convert once
  python mnist_multi_gpu_train.py --num_gpus=2               # 2 GPUs
  python mnist_multi_gpu_train.py --num_gpus=2 --cpu_towers \\
      --fake_data --batch_size=11 --num_epochs=3             # no GPU
  python mnist_multi_gpu_train.py --num_gpus=2 \\
      --variable_update=replicated                           # a copy per GPU
  python mnist_multi_gpu_train.py --num_gpus=2 --variable_update=replicated \\
      --worker_hosts=h0:2222,h1:2222 --job_name=worker \\
      --task_index=0                            # 2 machines (task 1 on h1)
  python mnist_multi_gpu_train.py --eval_only                # score it
  tensorboard --logdir=/tmp/mnist_train                      # --tb_logging

The towers take their batches from one shared reader of train.tfrecords,
each its own --batch_size examples, so a step trains on batch_size *
num_gpus examples and --num_epochs counts passes over the training set
whatever the number of towers. The last partial step of the input is
dropped: a run of E epochs over N examples takes exactly
floor(N * E / (batch_size * num_gpus)) steps (55,000 examples, 2 epochs,
2 towers of 50: 1,100 steps). When the input ends the trainer saves a
checkpoint, prints `Done training for E epochs, S steps.` and the test
accuracy of that checkpoint.

Measured on 2 shared CPU cores, no GPU, with --fake_data --num_gpus=2
--cpu_towers --batch_size=11 --num_epochs=3: 409 steps at 220 to 410
examples/sec (10 to 18 steps/sec), test accuracy on the sample set from
1.000 to 1.000 over the runs seen (chance 0.1; the tests require more than
0.5); the defaults (--fake_data alone, 120 steps) scored 0.916 to 1.000.
Not yet measured on the real MNIST files.
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import collections
import datetime

import tensorflow as tf
from absl import flags

import mnist_input
import mnist_model
from data_sets import mnist_data
from multigpu import folders
from multigpu.distributed import cluster, ps
from multigpu.flags import choices, common_flags, script, tower_flags
from multigpu.graph import dry_run, placement, variable_update
from multigpu.run import interrupts, loop_hooks, profile, report, training
from multigpu.train_dir import train_dirs

FLAGS = flags.FLAGS
flags.DEFINE_integer(
    "batch_size",
    50,
    "Examples per step of EACH tower: a step trains on "
    "batch_size * num_gpus examples.",
    lower_bound=1,
)
flags.DEFINE_integer(
    "num_epochs",
    2,
    "Passes over the training set; the run then takes "
    "floor(examples * num_epochs / (batch_size * num_gpus)) steps.",
    lower_bound=1,
)
flags.DEFINE_float(
    "learning_rate",
    0.01,
    "Learning rate of the momentum optimizer, constant: it applies to the "
    "mean gradient of a step's batch_size * num_gpus examples, the same "
    "whatever --num_gpus.",
    lower_bound=0.0,
)
common_flags.refuse_non_finite("learning_rate")
flags.DEFINE_string(
    "data_dir",
    "/tmp/mnist_data",
    "Folder that holds train/validation/test.tfrecords (see mnist_input.py).",
)
flags.DEFINE_boolean(
    "tb_logging",
    False,
    "Write the loss summaries of the last tower to --train_dir for "
    "TensorBoard; without it no summaries are written.",
)
flags.DEFINE_boolean(
    "eval_only",
    False,
    "Do not train: print the test accuracy of the newest checkpoint in "
    "--train_dir (with --data_dir, --batch_size, --fake_data; a flag only "
    "training uses is refused).",
)

common_flags.define_trainer_flags("/tmp/mnist_train", log_frequency=100)
tower_flags.define_multi_tower_flags()
flags.adopt_module_key_flags(common_flags)


def build_graph(
    *, data_dir, batch_size, num_epochs, learning_rate, task, update
):
    """Builds the shared input and the towers' training step.

    update: the `variable_update.VariableUpdate` of the towers (on its
    devices).

    Returns:
      loss: float32 scalar, the mean of the towers' total losses.
      train_op: the op of one training step.
      summary_op: the loss summaries of the last tower.
      hooks: the session hooks the optimizer needs.
    """
    # One reader for all towers, on the CPU: each get_next() is a new batch.
    with tf.device("/cpu:0"):
        batches = mnist_input.dataset(
            data_dir, "train", batch_size, num_epochs, training=True
        )
        iterator = tf.compat.v1.data.make_one_shot_iterator(batches)
    return mnist_model.train(
        iterator.get_next, update.devices, learning_rate, task, update
    )


def plan_dry_run(task, num_gpus, batch_size, learning_rate, update_choice):
    """Prints the placement plan of the towers on num_gpus GPUs."""
    dry_run.refuse_ps(task)
    devices = dry_run.gpu_devices(num_gpus)
    # One tower's batch: images and labels.
    batch_shapes = [
        ([batch_size, mnist_input.IMAGE_PIXELS], tf.float32),
        ([batch_size], tf.int32),
    ]
    update = choices.update_of_choice(devices, task, update_choice)
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        mnist_model.train(
            dry_run.synthetic_batches(batch_shapes),
            devices,
            learning_rate,
            task,
            update,
        )
        dry_run.check(
            graph,
            batch_shapes,
            dry_run.describe(
                devices,
                cluster_task=dry_run.task_name(
                    task.kind.serves, task.job_name, task.task_index
                ),
                **variable_update.describe(update),
            ),
            update,
            placement.session_config(devices),
        )


def report_accuracy(train_dir, data_dir, batch_size):
    """Prints the test accuracy of train_dir's newest checkpoint."""
    accuracy, num_examples, step = mnist_model.evaluate(
        train_dir, data_dir, batch_size
    )
    print(
        "%s: test accuracy = %.4f (%d examples, step %d)"
        % (datetime.datetime.now(), accuracy, num_examples, step)
    )


def main(argv):
    del argv
    task = choices.cluster_task_from_flags(FLAGS)
    choices.check_flags(FLAGS, task)
    options = choices.session_options_from_flags(FLAGS)
    update = choices.update_choice_from_flags(FLAGS)
    if FLAGS.dry_run:
        return plan_dry_run(
            task, FLAGS.num_gpus, FLAGS.batch_size, FLAGS.learning_rate, update
        )
    if task.job_name == "ps":
        return ps.run_ps(
            task,
            placement.session_config(options=options),
            FLAGS.operation_timeout_secs,
        )
    if FLAGS.fake_data:
        folders.make_folder(FLAGS.data_dir, "data_dir")
        mnist_data.write_fake_data(FLAGS.data_dir)
    mnist_data.say_if_sample_set(FLAGS.data_dir)
    if FLAGS.eval_only:
        report_accuracy(FLAGS.train_dir, FLAGS.data_dir, FLAGS.batch_size)
        return
    # A signal from here on is the run's, which stops before step 1.
    interrupts.hold()
    devices = placement.tower_devices(FLAGS.num_gpus, FLAGS.cpu_towers)
    config = placement.session_config(
        devices,
        FLAGS.log_device_placement,
        FLAGS.operation_timeout_secs,
        options,
    )
    print(placement.describe_devices(devices))
    _train_and_score(
        _Recipe(
            FLAGS.data_dir,
            FLAGS.batch_size,
            FLAGS.num_epochs,
            FLAGS.learning_rate,
            update,
        ),
        devices,
        training.Process(task, config, choices.cluster_settings(FLAGS)),
        _Output(FLAGS.train_dir, FLAGS.profile_steps, FLAGS.tb_logging),
        choices.schedule_from_flags(FLAGS),
        choices.start_from_flags(FLAGS),
    )


# What the towers train on, and how (`build_graph`); update: the
# `choices.UpdateChoice`.
_Recipe = collections.namedtuple(
    "_Recipe", "data_dir batch_size num_epochs learning_rate update"
)


# What the run writes, and its closing report names.
_Output = collections.namedtuple(
    "_Output", "train_dir profile_steps tb_logging"
)


def _train_and_score(recipe, devices, process, output, schedule, start):
    """Trains in train_dir until the input ends; the chief then scores."""
    task, train_dir = process.task, output.train_dir
    train_file = mnist_input.data_file(recipe.data_dir, "train")
    if task.is_chief:
        # Scored at the end: checked before hours of training.
        mnist_input.data_file(recipe.data_dir, "test")
    data = mnist_data.training_data(recipe.data_dir)
    if not start.clear_train_dir:
        train_dirs.refuse_other_data(train_dir, data, recipe.data_dir)
    profiling = profile.profile_hooks(output.profile_steps, train_dir)
    with (
        tf.Graph().as_default(),
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        step, closing = _step(recipe, devices, task, profiling)
        # A corrupt record stops the run with an error naming the file.
        with mnist_input.reading(train_file):
            log_frequency = _log_frequency(
                train_file, recipe, schedule, len(devices)
            )
            steps = training.run_training(
                step,
                schedule._replace(log_frequency=log_frequency),
                start,
                training.TrainDir(train_dir, [recipe.data_dir], None, data),
                process,
            )
    if steps == 0 and not task.kind.serves:
        raise ValueError(
            "%s holds %d example(s), fewer than one step takes (--batch_size="
            "%d x %d tower(s)); nothing was trained"
            % (
                train_file,
                mnist_input.count_records(train_file),
                recipe.batch_size,
                len(devices),
            )
        )
    print("Done training for %d epochs, %d steps." % (recipe.num_epochs, steps))
    if task.is_chief:
        report_accuracy(train_dir, recipe.data_dir, recipe.batch_size)
    report.print_closing_report(
        closing,
        step.examples_per_step,
        train_dir if task.is_chief else None,
        script.as_invoked(
            next_commands(train_dir, recipe.data_dir, output.tb_logging)
        ),
        profile.closing_lines(profiling, train_dir),
    )


def _log_frequency(train_file, recipe, schedule, num_towers):
    """--log_frequency, or a tenth of the run's steps if fewer (said when
    the flag was given)."""
    records = mnist_data.count_framed_records(train_file)
    steps = records * recipe.num_epochs // recipe.batch_size // num_towers
    if schedule.log_frequency_given:
        return loop_hooks.say_if_capped(schedule.log_frequency, steps)
    return loop_hooks.every_tenth(schedule.log_frequency, steps)


def _step(recipe, devices, task, profiling):
    """The towers' `training.Step` and its `report.RunReportHook`."""
    loss, train_op, summary_op, hooks = build_graph(
        data_dir=recipe.data_dir,
        batch_size=recipe.batch_size,
        num_epochs=recipe.num_epochs,
        learning_rate=recipe.learning_rate,
        task=task,
        update=choices.update_of_choice(devices, task, recipe.update),
    )
    closing = report.RunReportHook(loss)
    step = training.Step(
        train_op,
        loss,
        recipe.batch_size * len(devices),
        summary_op,
        [closing, *hooks, *profiling],
    )
    return step, closing


def next_commands(train_dir, data_dir, tb_logging):
    """The commands of the closing report: the score, and TensorBoard."""
    return [
        "python mnist_multi_gpu_train.py --eval_only --train_dir=%s "
        "--data_dir=%s" % (train_dir, data_dir),
        "tensorboard --logdir=%s" % train_dir
        if tb_logging
        else "(with --tb_logging the trainer writes the loss summaries "
        "for tensorboard)",
    ]


def run():
    script.run_script(main)


if __name__ == "__main__":
    run()
