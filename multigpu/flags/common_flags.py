"""The flags the scripts share, defined once: name, default, bounds, help.

Each script calls the `define_*` groups it takes and adopts this module's
key flags, so that its `--help` lists them. Importing two scripts into one
process (a test, a notebook) defines each flag once.
"""

import math

from absl import flags

from multigpu.graph import step_optimizer
from multigpu.run import profile

# The largest step a checkpoint's int64 global step holds: a step flag past
# it would fail in the run, after its folder and first checkpoint.
MAX_STEP = 2**63 - 1


def define_once(define, name, *args, **kwargs):
    """Calls define(name, ...) unless the flag exists (DuplicateFlagError)."""
    if name not in flags.FLAGS:
        define(name, *args, **kwargs)


def define_finite_float(name, default, help_text, **bounds):
    """Defines float flag name (once), refusing NaN and infinities."""
    if name in flags.FLAGS:
        return
    flags.DEFINE_float(name, default, help_text, **bounds)
    refuse_non_finite(name)


def refuse_non_finite(name):
    """Refuses NaN and infinities for float flag name, at parsing: nan
    passes any bound, and an infinity a lower one."""
    flags.register_validator(name, math.isfinite, "--%s must be finite" % name)


def define_trainer_flags(train_dir, log_frequency, train_dir_note=""):
    """The groups every trainer takes; train_dir_note: what --help adds on
    the default of --train_dir."""
    _define_output_flags(train_dir, log_frequency, train_dir_note)
    define_fake_data_flag()
    _define_warm_start_flags()
    define_session_flags()
    _define_profile_flags()


def define_cifar10_trainer_flags(data_url, train_dir):
    """The groups both CIFAR-10 trainers take; train_dir: the tutorial
    net's --train_dir (the flag's default is '': the script chooses)."""
    define_trainer_flags(
        "",
        log_frequency=10,
        train_dir_note="Default: %s for --model=tutorial, %s_MODEL for "
        "another --model (e.g. %s_resnet20), so that two models never share "
        "a folder." % (train_dir, train_dir, train_dir),
    )
    define_once(
        flags.DEFINE_integer,
        "max_steps",
        1000000,
        "Global step to stop at. A train_dir already there trains nothing.",
        lower_bound=1,
        upper_bound=MAX_STEP,
    )
    define_finite_float(
        "clip_gradients",
        0.0,
        "If > 0, scale the (averaged) gradients to at most this global "
        "norm: small batches at the tutorial's learning rate can diverge "
        "without it.",
        lower_bound=0.0,
    )
    define_once(
        flags.DEFINE_string,
        "data_url",
        data_url,
        "Where to download the archive from when --data_dir lacks it.",
    )
    _define_fp16_flags()
    define_model_flag()
    _define_recipe_flags()


def define_model_flag():
    define_once(
        flags.DEFINE_string,
        "model",
        "tutorial",
        "The network: tutorial (the tutorial's net), resnet20 or resnet56 "
        "(He et al. 2016, with their recipe), or MODULE:FUNCTION, a function "
        "(images, is_training) -> logits of your own (float32 [batch, 24, "
        "24, 3] in, [batch, 10] out), imported from the current folder or "
        "PYTHONPATH; the trainers train it with the tutorial's recipe unless "
        "the trainer's --learning_rate is set. The eval takes the trainer's "
        "--model.",
    )


def _define_recipe_flags():
    define_finite_float(
        "learning_rate",
        0.0,
        "0 trains with the --model's own recipe; > 0 replaces it by this "
        "learning rate for 128 examples per step (scaled with the examples "
        "per step), divided by 10 at --learning_rate_boundaries, with "
        "--momentum.",
        lower_bound=0.0,
    )
    if "learning_rate_boundaries" not in flags.FLAGS:
        flags.DEFINE_list(
            "learning_rate_boundaries",
            [],
            "With --learning_rate: steps of 128 examples (scaled like the "
            "rate) at which the learning rate is divided by 10, e.g. "
            "32000,48000.",
        )
        flags.register_validator(
            "learning_rate_boundaries",
            lambda steps: all(step.isdigit() for step in steps),
            "--learning_rate_boundaries: expected whole numbers of steps, "
            "e.g. 32000,48000",
        )
    define_finite_float(
        "momentum",
        0.0,
        "With --learning_rate: the optimizer's momentum; 0 is plain "
        "gradient descent.",
        lower_bound=0.0,
        upper_bound=0.999,
    )


def _define_output_flags(train_dir, log_frequency, train_dir_note):
    define_once(
        flags.DEFINE_string,
        "train_dir",
        train_dir,
        (
            "Where to write checkpoints and event logs. A restart on the "
            "same folder resumes from its newest checkpoint. " + train_dir_note
        ).strip(),
    )
    define_once(
        flags.DEFINE_boolean,
        "clear_train_dir",
        False,
        "Delete the checkpoints and event files in --train_dir before "
        "training instead of resuming from them (refused when the folder "
        "holds other files, or is or contains --data_dir).",
    )
    define_once(
        flags.DEFINE_integer,
        "log_frequency",
        log_frequency,
        "Steps between progress lines, at most a tenth of the run's steps "
        "(a run that lowers the value given says so).",
        lower_bound=1,
        upper_bound=MAX_STEP,
    )
    define_once(
        flags.DEFINE_boolean,
        "log_device_placement",
        False,
        "Log the device of every op.",
    )
    define_once(
        flags.DEFINE_integer,
        "save_checkpoint_steps",
        1000,
        "Steps between checkpoints; one is also saved at the last step, when "
        "the input ends and when the run is interrupted (Ctrl-C, SIGTERM, "
        "SIGHUP, SIGQUIT).",
        lower_bound=1,
        upper_bound=MAX_STEP,
    )
    define_once(
        flags.DEFINE_integer,
        "save_summaries_steps",
        0,
        "Steps between the summaries TensorBoard shows; they are also "
        "written at the first and the last step. 0: every 100 steps (as the "
        "tutorial's trainers write them), fewer in a run of under 2,000 "
        "steps, so that its charts have 20 points; the histograms, which "
        "cost about a training step each time, stay at every 100 steps.",
        lower_bound=0,
    )


def define_fake_data_flag():
    define_once(
        flags.DEFINE_boolean,
        "fake_data",
        False,
        "Write (once) and use a small generated sample set, in the real "
        "files' format, under --data_dir instead of the real data.",
    )


def _define_warm_start_flags():
    define_once(
        flags.DEFINE_string,
        "pretrained_model_checkpoint_path",
        "",
        "Start a new run (step 0) from the weights and their moving averages "
        "of this checkpoint (a path prefix such as .../model.ckpt-1000, or "
        "its folder), e.g. of another trainer or tower count. Ignored when "
        "--train_dir already has checkpoints: the run resumes from them.",
    )
    define_once(
        flags.DEFINE_boolean,
        "fine_tune",
        False,
        "With --pretrained_model_checkpoint_path: initialise afresh, instead "
        "of restoring, the layer that makes the logits, whichever the model: "
        "the weights of the last matmul or convolution before the loss and "
        "every variable added after it (its bias, any term added into the "
        "logits). The run prints which.",
    )


def define_session_flags():
    """The session options of the TF1 notes (`placement.session_config`)."""
    define_once(
        flags.DEFINE_boolean,
        "allow_growth",
        False,
        "Take GPU memory as it is needed instead of (almost) all of it at "
        "start (gpu_options.allow_growth), e.g. to share a GPU.",
    )
    define_finite_float(
        "gpu_memory_fraction",
        0.0,
        "Share of each GPU's memory this process may take "
        "(gpu_options.per_process_gpu_memory_fraction); 0 = TensorFlow's "
        "default.",
        lower_bound=0.0,
        upper_bound=1.0,
    )
    define_once(
        flags.DEFINE_integer,
        "num_intra_threads",
        0,
        "Threads that one op may use (intra_op_parallelism_threads); 0 = "
        "TensorFlow's choice (the CPU cores).",
        lower_bound=0,
    )
    define_once(
        flags.DEFINE_integer,
        "num_inter_threads",
        0,
        "Ops that may run at once (inter_op_parallelism_threads); 0 = "
        "TensorFlow's choice.",
        lower_bound=0,
    )


def _define_profile_flags():
    """--profile_steps, and the retired --trace_step, refused naming it
    (absl would refuse it as unknown without naming what replaces it)."""
    if "trace_step" not in flags.FLAGS:
        flags.DEFINE_integer(
            "trace_step",
            0,
            "Retired: TensorFlow's private timeline is replaced by its "
            "profiler; use --profile_steps=N,N.",
        )
        flags.register_validator("trace_step", _refuse_trace_step)
    if "profile_steps" not in flags.FLAGS:
        flags.DEFINE_string(
            "profile_steps",
            "",
            "FIRST,LAST: profile the steps that reach these global steps "
            "(inclusive) with TensorFlow's profiler, into TRAIN_DIR/plugins/"
            "profile for TensorBoard's Profile tab (the profile extra); '' "
            "profiles nothing.",
        )
        flags.register_validator("profile_steps", _check_profile_steps)


def _refuse_trace_step(value):
    if value:
        raise flags.ValidationError(
            "--trace_step is retired (the Chrome trace through TensorFlow's "
            "private timeline); use --profile_steps=%d,%d, the public "
            "profiler's profile for TensorBoard's Profile tab" % (value, value)
        )
    return True


def _check_profile_steps(value):
    try:
        profile.parse_steps(value)
    except ValueError as e:
        raise flags.ValidationError(str(e)) from None
    return True


def _define_fp16_flags():
    define_force_cpu_bfloat16_flag()
    define_finite_float(
        "fp16_loss_scale",
        step_optimizer.DEFAULT_LOSS_SCALE,
        "With --use_fp16 on GPUs (float16): multiply the loss by this before "
        "the gradients are computed and divide the gradients by it, so that "
        "small gradients do not underflow; 1 disables it. The starting "
        "scale of --fp16_enable_auto_loss_scale.",
        lower_bound=step_optimizer.MIN_LOSS_SCALE,
    )
    define_once(
        flags.DEFINE_boolean,
        "fp16_enable_auto_loss_scale",
        False,
        "With --use_fp16 on GPUs: a dynamic loss scale that skips the update "
        "and halves on non-finite gradients and doubles after "
        "--fp16_inc_loss_scale_every_n good steps in a row.",
    )
    define_once(
        flags.DEFINE_integer,
        "fp16_inc_loss_scale_every_n",
        step_optimizer.DEFAULT_INC_EVERY_N,
        "Good steps in a row before the dynamic loss scale doubles.",
        lower_bound=1,
    )


def define_force_cpu_bfloat16_flag():
    define_once(
        flags.DEFINE_boolean,
        "force_cpu_bfloat16",
        False,
        "With --use_fp16 on a CPU without bfloat16 instructions (AVX512_BF16 "
        "or AMX), compute in bfloat16 anyway (emulated, about 10x slower) "
        "instead of float32.",
    )
