"""Trains the CIFAR-10 tutorial model on several GPUs: one tower per GPU.

Run it:
  python cifar10_multi_gpu_train.py --num_gpus=2                # 2 GPUs
  python cifar10_multi_gpu_train.py --num_gpus=2 --cpu_towers \\
      --fake_data --max_steps=300                               # no GPU
  python cifar10_multi_gpu_train.py --num_gpus=2 --xla \\
      --variable_device=tower                                   # options
  python cifar10_multi_gpu_train.py --num_gpus=2 --model=resnet20  # ResNet
  python cifar10_multi_gpu_train.py --num_gpus=8 \\
      --variable_update=replicated                              # NCCL
  python cifar10_multi_gpu_train.py --num_gpus=8 \\
      --variable_update=replicated --worker_hosts=h0:2222,h1:2222 \\
      --job_name=worker --task_index=0       # 2 machines (task 1 on h1)
  python cifar10_eval.py --run_once                             # score it
  tensorboard --logdir=/tmp/cifar10_train                       # run, eval

Each tower reads its own batch of --batch_size examples, so a step trains on
batch_size * num_gpus examples. The variables live on the CPU; each tower
computes its gradients; the CPU averages them and applies them once. With
--variable_update=replicated each tower holds a copy of the variables
instead, the gradients are all-reduced between the towers and each copy
takes the same update; checkpoints are the same (docs/replicated.md).
Restarting on the same --train_dir resumes from its newest checkpoint.

The learning rate follows the examples trained, not the steps. The
tutorial's rate, 0.1 times 0.1 every 350 epochs, counts an epoch as 50,000
examples of all towers: it decays every 350 * 50,000 / (batch_size *
num_gpus) steps, rounded down (68,359 steps on 2 GPUs of 128, 136,718 on
one). The tutorial's original multi-GPU script counted steps of one
tower's batch instead: it decayed every 136,718 steps of 128 whatever
--num_gpus, so on N GPUs every N * 350 epochs. The ResNets and
--learning_rate give a rate for 128 examples per step, multiplied by
batch_size * num_gpus / 128, and boundaries in steps of 128 examples, moved
to the step (rounded) where as many examples are trained. With
--sync_replicas a step's examples are those of all the
--replicas_to_aggregate workers it aggregates.

Options for GPUs, each checked by the tests on the CPU path:
--variable_device=tower keeps the variables and the averaging on the first
tower's device; --xla compiles each tower with XLA;
--prefetch_to_device (on by default) stages each tower's next batch on its
device during the current step.
"""

# Before TensorFlow loads: see multigpu/quiet_cpp_logs.py.
from multigpu import quiet_cpp_logs  # noqa: F401

# isort: split

import collections
import functools
from typing import NamedTuple

import tensorflow as tf
from absl import flags

import cifar10
import cifar10_input
from cifar10_models import registry
from data_sets import cifar10_batches, cifar10_data
from multigpu.distributed import cluster, ps
from multigpu.flags import choices, common_flags, script, tower_flags
from multigpu.graph import (
    dry_run,
    op_kernels,
    placement,
    step_optimizer,
    summaries,
    towers,
    variable_update,
)
from multigpu.run import interrupts, profile, report, training
from multigpu.train_dir import train_dirs

FLAGS = flags.FLAGS
common_flags.define_cifar10_trainer_flags(
    cifar10_input.DATA_URL, cifar10_input.TRAIN_DIR
)
tower_flags.define_multi_tower_flags()
tower_flags.define_device_flags()
flags.adopt_module_key_flags(common_flags)
# --batch_size (per tower), --data_dir and --use_fp16 are the tutorial's, in
# cifar10.
flags.adopt_module_key_flags(cifar10)


TowerInput = collections.namedtuple(
    "TowerInput", "get_next batch_size prefetch", defaults=(False,)
)
TowerInput.__doc__ = """The towers' input: get_next() -> (float32
[batch_size, 24, 24, 3] images, int32 [batch_size] labels), called once per
tower; prefetch: each tower's next batch staged on its device."""

StepOptions = collections.namedtuple(
    "StepOptions", "clip_norm xla max_steps", defaults=(0.0, False, None)
)
StepOptions.__doc__ = """clip_norm 0 clips nothing; max_steps, the global
step no step claims past, may be None."""


def build_graph(
    *,
    inputs,
    update,
    dtypes,
    model=registry.TUTORIAL,
    task=cluster.LOCAL_TASK,
    options=StepOptions(),
):
    """The towers, the gradients' reduction and the update: (loss,
    train_op, summary_op, hooks), loss the towers' mean (float32 scalar)."""
    global_step = tf.compat.v1.train.get_or_create_global_step()
    examples = inputs.batch_size * len(update.devices) * task.replicas_per_step
    with tf.name_scope(summaries.UPDATE + "/"):
        lr = model.learning_rate(global_step, examples)
        scaled = step_optimizer.wrap(model.optimizer(lr), dtypes.loss_scaling)
    step = task.kind.step_optimizer(
        scaled,
        step_optimizer.Steps(
            options.max_steps,
            task.replicas_to_aggregate,
            task.num_workers,
            cifar10.MOVING_AVERAGE_DECAY,
        ),
    )
    plan = variable_update.tower_plan(update)
    put_ops = []
    next_batch = functools.partial(_tower_batch, inputs, put_ops)
    tower_losses, tower_grads, scope = _build_towers(
        plan, next_batch, step.scaled, model, dtypes.compute_dtype, options.xla
    )
    step_optimizer.refuse_sync_statistics(
        step, towers.batch_norm_updates(scope), model.name
    )
    loss_averages, later = variable_update.update_waits(
        update,
        functools.partial(
            summaries.add_loss_summaries, tower_losses[-1], global_step, scope
        ),
    )
    with tf.name_scope(summaries.REDUCE + "/"):
        reduced = _reduce(update, tower_grads, options.clip_norm, loss_averages)
        reduced = step_optimizer.skip_unless_finite(step.scaled, reduced)
        loss = tf.reduce_mean(tf.stack(tower_losses), name="mean_tower_loss")
    beside = _Beside([*loss_averages, *put_ops], later)
    train_op = _update(update, plan, step, reduced, scope, beside)
    hooks = cluster.sync_hooks(step.sync, task)
    if put_ops:
        hooks.append(towers.WarmUpHook(put_ops))
    return loss, train_op, summaries.last_tower_summaries(scope), hooks


_Beside = collections.namedtuple("_Beside", "ops later")
_Beside.__doc__ = """What the step runs beside its update."""


def _update(update, plan, step, reduced, scope, beside):
    """The step's op: the gradients, the last tower's statistics, then the
    moving averages unless the step moves them."""
    global_step = tf.compat.v1.train.get_global_step()
    with tf.name_scope(summaries.UPDATE + "/"):
        applied = step_optimizer.step_applied(step.scaled)
        apply_op = variable_update.apply_gradients(
            update,
            plan,
            step.optimizer,
            reduced,
            variable_update.Statistics(
                towers.batch_norm_updates(scope), applied
            ),
            beside.later,
        )
        if not step.moves_averages:
            apply_op = step_optimizer.average_variables(
                [apply_op], global_step, applied, cifar10.MOVING_AVERAGE_DECAY
            )
        train_op = tf.group(apply_op, *beside.ops)
    summaries.add_histograms(reduced[0])
    return train_op


def _build_towers(plan, next_batch, opt, model, compute_dtype, xla):
    """(the towers' float32 total losses, their (gradient, variable)
    lists, the last tower's scope)."""
    tower_losses, tower_grads = [], []
    for tower in plan:
        with towers.tower(tower, xla) as scope:
            images, labels = next_batch()
            logits = registry.logits(model, images, True, compute_dtype)
            towers.add_cross_entropy(logits, labels)
            tower_losses.append(towers.tower_total_loss(scope))
            tower_grads.append(
                variable_update.tower_gradients(opt, tower_losses[-1], tower)
            )
    return tower_losses, tower_grads, scope


def _tower_batch(inputs, put_ops):
    """One tower's batch, read on the CPU (staged on its device: put_ops)."""
    with tf.device("/cpu:0"):
        images, labels = inputs.get_next()
    if inputs.prefetch:
        (images, labels), put_op = towers.stage_on_device([images, labels])
        put_ops.append(put_op)
    summaries.image_summary("images", images)
    return images, labels


def _reduce(update, tower_grads, clip_norm, loss_averages):
    """The reduced gradients, one list per copy, waiting (through an
    identity each: a sync optimizer's queues must not) for the loss averages,
    which read the global step the update moves."""
    reduced = variable_update.reduce_gradients(update, tower_grads)
    if clip_norm > 0:
        reduced = [towers.clip_gradients(grads, clip_norm) for grads in reduced]
    if not loss_averages:
        return reduced
    with tf.control_dependencies(loss_averages):
        return [
            [(towers.identity_beside(grad), var) for grad, var in grads]
            for grads in reduced
        ]


def main(argv):
    del argv
    task = choices.cluster_task_from_flags(FLAGS)
    choices.check_flags(FLAGS, task)
    recipe = choices.recipe_from_flags(FLAGS)
    # Checked on a ps too (a user's model imported), which would else wait
    # for workers that refuse it; the workers take it with their train_dir.
    registry.model(*recipe)
    options = choices.session_options_from_flags(FLAGS)
    if FLAGS.dry_run:
        dry_run.refuse_ps(task)
        devices = dry_run.gpu_devices(FLAGS.num_gpus)
    elif task.job_name == "ps":
        return ps.run_ps(
            task,
            placement.session_config(options=options),
            FLAGS.operation_timeout_secs,
        )
    else:
        devices = placement.tower_devices(FLAGS.num_gpus, FLAGS.cpu_towers)
    model, train_dir = registry.model_and_train_dir(
        *recipe, FLAGS.train_dir, not (FLAGS.dry_run or FLAGS.clear_train_dir)
    )
    plan = choices.tower_plan(FLAGS, devices, task)
    print(choices.describe_plan(plan))
    if FLAGS.dry_run:
        return _check_plan(FLAGS.batch_size, task, plan, model)
    # A signal from here on is the run's, which stops before step 1.
    interrupts.hold()
    cifar10_data.prepare_data_dir(
        FLAGS.data_dir, FLAGS.fake_data, FLAGS.data_url
    )
    data = cifar10_data.training_data(FLAGS.data_dir)
    if not FLAGS.clear_train_dir:
        train_dirs.refuse_other_data(train_dir, data, FLAGS.data_dir)
    _train(
        _Towers(FLAGS.batch_size, task, plan, model),
        training.TrainDir(train_dir, [FLAGS.data_dir], model.name, data),
        FLAGS.profile_steps,
        choices.schedule_from_flags(FLAGS),
        choices.start_from_flags(FLAGS),
        choices.cluster_settings(FLAGS),
    )


def _build(get_next, batch_size, task, plan, model, max_steps=None):
    """`build_graph`'s ops, then the check of its bfloat16 kernels."""
    graph_ops = build_graph(
        inputs=TowerInput(get_next, batch_size, plan.options.prefetch),
        update=plan.update,
        dtypes=step_optimizer.Dtypes(plan.compute_dtype, plan.loss_scaling),
        model=model,
        task=task,
        options=StepOptions(
            plan.options.clip_norm, plan.options.xla, max_steps
        ),
    )
    op_kernels.refuse_bfloat16_without_cpu_kernel(
        tf.compat.v1.get_default_graph(), plan.compute_dtype
    )
    return graph_ops


def _check_plan(batch_size, task, plan, model):
    """--dry_run on synthetic batches; returns the check's exit code."""
    batch_shapes = cifar10_batches.batch_shapes(batch_size)
    with (
        tf.Graph().as_default() as graph,
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        with tf.device("/cpu:0"), tf.name_scope(summaries.INPUT):
            get_next = dry_run.synthetic_batches(batch_shapes)
        _build(get_next, batch_size, task, plan, model)
        return dry_run.check(
            graph,
            batch_shapes,
            dry_run.describe(
                plan.devices,
                model=model.name,
                compute_dtype=plan.compute_dtype.name,
                **variable_update.describe(plan.update),
                xla=plan.options.xla,
                prefetch_to_device=plan.options.prefetch,
                cluster_task=dry_run.task_name(
                    task.kind.serves, task.job_name, task.task_index
                ),
                loss_scaling=step_optimizer.describe(plan.loss_scaling),
            ),
            plan.update,
            plan.config,
        )


class _Towers(NamedTuple):
    batch_size: int  # per tower
    task: cluster.ClusterTask
    plan: choices.TowerPlan
    model: registry.Model


def _train(towers, folders, profile_steps, schedule, start, settings):
    """Builds the towers' graph, trains it and prints the closing report;
    folders has one data folder."""
    task, plan, train_dir = towers.task, towers.plan, folders.path
    [data_dir] = folders.data_dirs
    examples_per_step = towers.batch_size * len(plan.devices)
    with (
        tf.Graph().as_default(),
        tf.compat.v1.device(cluster.device_setter(task)),
    ):
        with tf.device("/cpu:0"), tf.name_scope(summaries.INPUT):
            get_next = cifar10_batches.distorted_batches(
                data_dir, towers.batch_size
            )
        loss, train_op, summary_op, hooks = _build(
            get_next,
            towers.batch_size,
            task,
            plan,
            towers.model,
            schedule.max_steps,
        )
        profiling = profile.profile_hooks(profile_steps, train_dir)
        closing = report.RunReportHook(loss)
        training.run_training(
            training.Step(
                train_op,
                loss,
                examples_per_step,
                summary_op,
                [closing, *hooks, *profiling],
            ),
            schedule,
            start,
            folders,
            training.Process(task, plan.config, settings),
        )
    report.print_closing_report(
        closing,
        examples_per_step,
        train_dir if task.is_chief else None,
        script.as_invoked(
            registry.next_commands(towers.model, train_dir, data_dir)
        ),
        profile.closing_lines(profiling, train_dir),
    )


def run():
    script.run_script(main)


if __name__ == "__main__":
    run()
