"""The data-parallel machinery: no data set and no model is known here.

- `graph/`: building the graph.
  - `blocks`: the graph's top-level name scopes (input, model, towers,
    reduce, update, summaries, session), left out of tags and checkpoints.
  - `placement`: which device each tower runs on, where the variables
    live (the one device function of a tower), the session's
    `ConfigProto`, the compute dtype.
  - `variables`: the variable helpers of both models.
  - `model_variables`: the variables a user's model asks for, checked as
    it asks for them.
  - `getter_arguments`: a custom getter's arguments, by name, however
    the model passes them.
  - `towers`: one tower per device under `tower_N`, each tower's loss
    (with the model's regularizers) and gradients, their average, the
    batch-norm updates, the staged input.
  - `any_model`: a model `(images, is_training) -> logits` called in the
    compute dtype with float32 variables; what the towers refuse.
  - `variable_update`: --variable_update, one copy of the variables or
    one per tower; the gradients reduced and applied.
  - `copy_names`: the names of the towers' copies of the variables.
  - `copy_gradients`: a tower's gradients, the gradient of every copy of
    a variable it reads counted.
  - `gradient_reduction`: every mode's reduction of the towers' gradients.
  - `update_gates`: what every mode's update waits for, and the
    statistics every copy takes after it.
  - `all_reduce`: the replicated towers' all-reduce (NCCL, collective ops,
    one device) and its bytes.
  - `collectives`: across the workers: all-reduce, packing, broadcast.
  - `moving_averages`: the moving averages of the weights and statistics.
  - `step_claims`: a ps cluster worker's step claims its global step
    first, so that none lands past --max_steps.
  - `loss_scale`: float16 loss scaling, fixed or dynamic.
  - `float32_decay`: weight decay of the float32 variables in reduced
    precision.
  - `top_k_hits`: the eval's hits of precision @ 1 and recall @ 5.
  - `summaries`: summaries tagged without `tower_N/`, the last tower's.
  - `loss_summaries`: the losses, raw and as averages that start at the
    first loss.
  - `dry_run`: the placement plan for N GPUs, without them.
  - `network_plan`: the dry run's bytes on the network, and its scaling.
  - `op_kernels`: the kernels this TensorFlow build registers.
  - `rewrite_audit`: the ops Grappler writes into a graph, checked before
    a session runs them.
- `run/`: running it safely.
  - `training`: the training loop (`run_training`).
  - `failures`: the one line a failed run says (a NaN, a full disk, a
    lost cluster).
  - `loop_hooks`: its hooks: the step log, summaries, checkpoints.
  - `chief_savers`: the chief's hooks, and how often it writes summaries.
  - `interrupts`: Ctrl-C and SIGTERM save the step and exit 130 / 143.
  - `preemption`: a signal to one worker of a cluster of workers only
    stops every worker at one step.
  - `last_step`: a lost cluster of workers only: the chief saves the last
    step it completed.
  - `profile`: steps under TensorFlow's profiler (`--profile_steps`).
  - `op_table`: the profile's ops by their own time, as text.
  - `sessions`: the session creators of the chief and the other workers.
  - `report`: the closing report of a run and the commands to run next.
- `train_dir/`: what a run keeps in its train_dir.
  - `train_dirs`: one trainer per train_dir; what `--clear_train_dir`
    deletes; the model's record.
  - `checkpoints`: a train_dir's checkpoints, read and pruned by exact
    name; the newest that reads in full.
  - `restore`: what a checkpoint must hold; warm start and fine-tune.
  - `data_records`: the data's record: a run on other data refused.
  - `event_files`: the event file checked every step; a failed write stops.
- `distributed/`: beyond one machine.
  - `kinds`: the kinds of run (one process, ps, ps with sync replicas,
    workers only), a row each, and what differs between them, a column
    each.
  - `cluster`: the cluster mode: tasks, servers, sync replicas.
  - `collective_cluster`: a cluster of workers only.
  - `agreement`, `ps_agreement`: the settings the workers compare before
    step 1.
  - `tf_config`: the cluster from `TF_CONFIG`.
  - `watchdog`: a worker that loses its ps task says so and exits.
  - `ps`: the ps task: serves until every worker is done.
- `flags/`: the flags, defined, checked and explained.
  - `common_flags`: the flags several trainers share.
  - `tower_flags`: the flags of the multi-tower trainers.
  - `flag_checks`: the flags checked together, one line per mistake.
  - `choices`: the flags turned, once in `main`, into plain values.
  - `plans`: the trainers' choices made against their devices.
  - `flag_help`: a script's `--help`, its flags grouped by purpose.
  - `script`: how a script runs: one line per user error (`run_script`).
  - `argparse_era`: the tutorial's `cifar10.parser` of Sept. 2017 to
    Jan. 2018.
- What every script uses:
  - `quiet_cpp_logs`: hides TensorFlow's C++ start-up notices.
  - `cpp_log_filter`: the filter's own process, and which lines it drops.
  - `errors`: `TrainingError`, `Interrupted`.
  - `folders`: folder flags checked and made.

The data sets' support code is the package `data_sets` beside this one.
Nothing here reads flags (the trainers pass plain values) or does work at
import, except `quiet_cpp_logs`, which every script imports first to
filter what TensorFlow prints as it loads (and to end a Ctrl-C then with
one line), and this file, which runs before any of them (below).
"""

import importlib.util
import os

# tf.compat.v1.layers needs Keras 2 (tf-keras, the "layers" extra) on
# TensorFlow 2.16+, which TensorFlow picks by this variable as it loads:
# set here, where every script, test and benchmark enters the package
# before TensorFlow loads; never over the user's own value, and only with
# tf-keras installed (without it, `any_model.call_model` says what to
# install).
if importlib.util.find_spec("tf_keras") is not None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
