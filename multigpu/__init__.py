"""What the trainers share, one concern per module.

- `placement`: which device each tower runs on, where the variables live,
  the session's `ConfigProto`.
- `towers`: one tower per device under `tower_N`, each tower's loss and
  gradients, their average, the staged input.
- `summaries`: summaries tagged without `tower_N/`, the last tower's.
- `training`: the training loop (`run_training`) and its hooks.
- `checkpoints`: the newest checkpoint of a folder that reads in full.
- `interrupts`: SIGINT / SIGTERM stop the run after saving the step.
- `train_dirs`: what the trainers write in a train_dir (`--clear_train_dir`
  deletes only that) and its lock: one trainer per train_dir.
- `sample_sets`: the --fake_data sets are marked, never written over other
  files, and said when used.
- `folders`: the folders flags name, made or refused in one line.
- `sessions`: the session creators of the chief and the other workers.
- `errors`: `TrainingError`, and one line per user error (`run_script`).
- `cluster`: the cluster mode: tasks, servers, sync replicas, the ps.
- `watchdog`: a worker that loses its ps task says so and exits.
- `common_flags`: the flags several trainers share.

Nothing here reads flags or does work at import.
"""
