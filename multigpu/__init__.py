"""The data-parallel machinery: no data set and no model is known here.

It stands in floors; an import goes to its own floor or one below, never
up. Each floor, and its modules (docs/layout.md says what each holds):

- `multigpu/`, what every script uses: `quiet_cpp_logs`, `cpp_log_filter`,
  `errors`, `folders`.
- `graph/`, building the graph: `placement`, `variables`, `any_model`,
  `towers`, `variable_update`, `gradient_reduction`, `all_reduce`,
  `collectives`, `step_optimizer`, `summaries`, `dry_run`, `network_plan`,
  `op_kernels`.
- `train_dir/`, what a run keeps: `train_dirs`, `lock`, `checkpoints`,
  `restore`, `event_files`.
- `distributed/`, beyond one machine: `kinds`, `cluster`, `ps`,
  `agreement`, `jobs`, `sessions`, `tf_config`.
- `run/`, running it safely: `training`, `loop_hooks`, `interrupts`,
  `failures`, `profile`, `report`.
- `flags/`, the flags, turned into plain values in main(): `common_flags`,
  `tower_flags`, `choices`, `script`.

Nothing below `flags/` reads flags, and nothing does work at import but
`quiet_cpp_logs`, which every script imports first, and this file.
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
