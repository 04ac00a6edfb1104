"""Trains the CIFAR-10 tutorial model on one device.

Run it:
  python cifar10_train.py --fake_data --max_steps=300      # no download
  python cifar10_train.py                                  # real CIFAR-10
  python cifar10_train.py --model=resnet20                 # or my_file:net
  python cifar10_eval.py --run_once                        # score it
  tensorboard --logdir=/tmp/cifar10_train                  # run and eval

The published anchor: about 86% precision @ 1 after 100K steps (256 epochs)
at batch 128. Restarting on the same --train_dir resumes from its newest
checkpoint; --clear_train_dir starts over. Each --model has its own default
--train_dir (/tmp/cifar10_train for the tutorial's, /tmp/cifar10_train_MODEL
for another); a --train_dir of another model's checkpoints is refused.
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import tensorflow as tf
from absl import flags

import cifar10
import cifar10_input
from cifar10_models import registry
from data_sets import cifar10_batches, cifar10_data
from multigpu.flags import choices, common_flags, script
from multigpu.graph import op_kernels, placement, step_optimizer, summaries
from multigpu.run import interrupts, profile, report, training
from multigpu.train_dir import train_dirs

FLAGS = flags.FLAGS
common_flags.define_cifar10_trainer_flags(
    cifar10_input.DATA_URL, cifar10_input.TRAIN_DIR
)
flags.adopt_module_key_flags(common_flags)
# --batch_size, --data_dir and --use_fp16 are the tutorial's, in cifar10.
flags.adopt_module_key_flags(cifar10)


def build_graph(
    *,
    data_dir,
    batch_size,
    dtypes,
    clip_norm=0.0,
    device="/cpu:0",
    model=registry.TUTORIAL,
):
    """Builds input, model, loss and train op in the default graph, each in
    its block (`summaries`).

    device: str, where the model computes; its variables live on the CPU.
    model: the `registry.Model` to train, with its recipe.

    dtypes: the `step_optimizer.Dtypes` of the step.
    clip_norm: float, 0 for no clipping of the gradients' global norm.

    Returns:
      loss: float32 scalar, the total loss of the step's batch.
      train_op: the op of one training step.
    """
    global_step = tf.compat.v1.train.get_or_create_global_step()
    # The input pipeline stays on the CPU, so the device only computes.
    with tf.device("/cpu:0"), tf.name_scope(summaries.INPUT):
        images, labels = cifar10_batches.train_inputs(data_dir, batch_size)
    with tf.name_scope(summaries.MODEL):
        summaries.image_summary("images", images)
        with tf.compat.v1.device(
            placement.device_function(device, placement.VARIABLE_DEVICE)
        ):
            logits = registry.logits(model, images, True, dtypes.compute_dtype)
        loss = cifar10.loss(logits, labels)
    return loss, cifar10.train(
        loss,
        global_step,
        batch_size=batch_size,
        clip_norm=clip_norm,
        loss_scaling=dtypes.loss_scaling,
        learning_rate_fn=model.learning_rate,
        optimizer_fn=model.optimizer,
    )


def main(argv):
    del argv
    choices.check_flags(FLAGS)
    model, train_dir = registry.model_and_train_dir(
        *choices.recipe_from_flags(FLAGS),
        FLAGS.train_dir,
        not FLAGS.clear_train_dir,
    )
    config = placement.session_config(
        log_device_placement=FLAGS.log_device_placement,
        options=choices.session_options_from_flags(FLAGS),
    )
    devices = placement.tower_devices(1, cpu_towers=True)
    # Before the data: a refused flag writes nothing.
    compute_dtype, loss_scaling = choices.dtypes(FLAGS, devices)
    # A signal from here on is the run's, which stops before step 1.
    interrupts.hold()
    cifar10_data.prepare_data_dir(
        FLAGS.data_dir, FLAGS.fake_data, FLAGS.data_url
    )
    data = cifar10_data.training_data(FLAGS.data_dir)
    if not FLAGS.clear_train_dir:
        train_dirs.refuse_other_data(train_dir, data, FLAGS.data_dir)
    print(placement.describe_devices(devices))
    with tf.Graph().as_default():
        loss, train_op = build_graph(
            data_dir=FLAGS.data_dir,
            batch_size=FLAGS.batch_size,
            dtypes=step_optimizer.Dtypes(compute_dtype, loss_scaling),
            clip_norm=FLAGS.clip_gradients,
            device=devices[0],
            model=model,
        )
        op_kernels.refuse_bfloat16_without_cpu_kernel(
            tf.compat.v1.get_default_graph(), compute_dtype
        )
        profiling = profile.profile_hooks(FLAGS.profile_steps, train_dir)
        closing = report.RunReportHook(loss)
        training.run_training(
            training.Step(
                train_op, loss, FLAGS.batch_size, hooks=[closing, *profiling]
            ),
            choices.schedule_from_flags(FLAGS),
            choices.start_from_flags(FLAGS),
            training.TrainDir(train_dir, [FLAGS.data_dir], model.name, data),
            training.Process(config=config),
        )
    report.print_closing_report(
        closing,
        FLAGS.batch_size,
        train_dir,
        script.as_invoked(
            registry.next_commands(model, train_dir, FLAGS.data_dir)
        ),
        profile.closing_lines(profiling, train_dir),
    )


def run():
    script.run_script(main)


if __name__ == "__main__":
    run()
