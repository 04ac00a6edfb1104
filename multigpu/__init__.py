"""What the trainers share, one concern per module.

- `placement`: which device each tower runs on, where the variables live,
  the session's `ConfigProto`, the compute dtype.
- `variables`: the variable helpers of both models.
- `towers`: one tower per device under `tower_N`, each tower's loss and
  gradients, their average, the staged input.
- `loss_scale`: float16 loss scaling, fixed or dynamic.
- `summaries`: summaries tagged without `tower_N/`, the last tower's.
- `training`: the training loop (`run_training`) and its hooks.
- `interrupts`: Ctrl-C and SIGTERM save the step and exit 130 / 143.
- `trace`: the Chrome trace of one step (`--trace_step`).
- `checkpoints`: a train_dir's checkpoints; the newest that reads in full.
- `restore`: what a checkpoint must hold; warm start and fine-tune.
- `sessions`: the session creators of the chief and the other workers.
- `train_dirs`: one trainer per train_dir; what `--clear_train_dir` deletes.
- `folders`: folder flags checked and made.
- `errors`: `TrainingError`, and one line per user error (`run_script`).
- `cluster`: the cluster mode: tasks, servers, sync replicas, the ps.
- `tf_config`: the cluster from `TF_CONFIG`.
- `watchdog`: a worker that loses its ps task says so and exits.
- `dry_run`: the placement plan for N GPUs, without them.
- `common_flags`: the flags several trainers share.
- `cifar10_batches`: the trainers' and the eval's CIFAR-10 batches.
- `cifar10_data`, `mnist_data`: the data sets on disk: writers, the sample
  sets, the CIFAR-10 download, the MNIST converter.
- `sample_sets`: the sample sets' marker.
- `quiet_cpp_logs`: hides TensorFlow's C++ start-up notices.

Nothing here reads flags (the trainers pass plain values) or does work at
import, except `quiet_cpp_logs`, which every script imports first to
filter what TensorFlow prints as it loads.
"""
