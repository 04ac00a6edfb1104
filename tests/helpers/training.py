"""The fault tests' trainers and flags, and a training run that must fail."""

import pytest

from helpers.scripts import run_script

# Small steps: the faults are under test, not the learning. At batches of
# 4 or 8 the tutorial's learning rate of 0.1 diverges now and then within a
# few hundred steps; clipping the gradients' norm keeps every run finite.
BATCH_SIZE = 4
CLIP_FLAG = "--clip_gradients=5"


def trainer_flags(data_dir, train_dir, *flags):
    """The trainer's flags; a flag in `flags` wins over these (absl)."""
    return [
        "--fake_data",
        "--data_dir=%s" % data_dir,
        "--train_dir=%s" % train_dir,
        "--batch_size=%d" % BATCH_SIZE,
        "--log_frequency=1000",
        CLIP_FLAG,
        *flags,
    ]


def training_error(train_op, loss, train_dir, **kwargs):
    """Runs `training.run_training` for 10 steps, which must stop in error.

    Args:
      train_op, loss: of the default graph; loss a float32 scalar.
      train_dir: the folder it writes.
      **kwargs: run_training's other arguments.

    Returns:
      The message of the `errors.TrainingError` it raised.
    """
    from multigpu import errors
    from multigpu.flags import choices
    from multigpu.run import training
    from multigpu.train_dir import restore

    with pytest.raises(errors.TrainingError) as error:
        training.run_training(
            training.Step(train_op, loss, 1, hooks=kwargs.get("hooks", ())),
            choices.Schedule(
                1,
                10,
                kwargs.get("save_checkpoint_steps", 1000),
                kwargs.get("save_summaries_steps", 0),
            ),
            choices.Start(False, restore.Pretrained()),
            training.TrainDir(str(train_dir)),
        )
    return str(error.value)


# The trainers, as (script, flags): one device, and two towers on the CPU.
SINGLE = ("cifar10_train.py",)


MULTI = ("cifar10_multi_gpu_train.py", "--num_gpus=2", "--cpu_towers")


def run_trainer(trainer, data_dir, train_dir, *flags, **kwargs):
    script, *script_flags = trainer
    return run_script(
        script,
        *script_flags,
        *trainer_flags(data_dir, train_dir, *flags),
        **kwargs,
    )
