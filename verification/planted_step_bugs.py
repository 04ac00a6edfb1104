"""The planted bugs of a step's numbers, and what a planted bug is.

Each bug is one text of one file and its replacement, with the quick
checks (tests of `-m "not slow"`) that should catch it: here the towers,
the gradients' reduction, transfer and clipping, the sync chief's
aggregation, the loss scale, the moving averages, the LRN, the ResNet,
the eval's recall, the network plan, the equivalence runner's tolerance
and table, and its filter of TensorFlow's C++ notices.
`verification/planted_bugs.py` plants them.
"""

import collections

Bug = collections.namedtuple("Bug", "name path old new description checks")
Bug.__doc__ = """One planted bug.

name: str, what --bugs takes.
path: str, the file, relative to the repository.
old, new: str, the exact text (found once in the file) and its replacement.
description: str, one line.
checks: tuple of str, pytest node ids (of tests under -m "not slow") that
  should fail with the bug planted.
"""

_CELL = (
    "tests/test_equivalence.py::"
    "test_each_cell_of_the_fast_slice_trains_what_one_device_trains[%s]"
)
_TOLERANCE = "tests/test_equivalence_tolerance.py::"
_RESNET = (
    "tests/test_resnet_reference.py::"
    "test_resnet20_logits_equal_a_numpy_forward_pass_of_its_weights"
)
_LRN = "tests/test_cifar10_lrn.py::"
_LINKS = "tests/test_bench_links.py::"
_OVERFLOW = (
    "tests/test_reduced_precision.py::"
    "test_one_towers_float16_overflow_skips_the_step_of_every_copy[%d]"
)

BUGS = [
    Bug(
        "copy_gap_ignored",
        "verification/equivalence_table.py",
        "result.worst <= 1.0 and result.copy_gap == 0.0",
        "result.worst <= 1.0",
        "the runner's exit status ignores a copy that differs",
        (
            _TOLERANCE + "test_the_exit_code_counts_a_copy_gap_as_out_and_an_"
            "unsettled_cell_apart",
        ),
    ),
    Bug(
        "unsettled_passes",
        "verification/equivalence_table.py",
        "return 1 if out or (unsettled and not allow_unsettled) else 0",
        "return 1 if out else 0",
        "the runner exits 0 with a cell whose tolerance never settled",
        (
            _TOLERANCE + "test_the_exit_code_counts_a_copy_gap_as_out_and_an_"
            "unsettled_cell_apart",
        ),
    ),
    Bug(
        "settles_on_a_tip",
        "verification/equivalence_tolerance.py",
        "spread <= MULTIPLE * other and other <= MULTIPLE * spread",
        "spread <= MULTIPLE * other",
        "a spread within the tolerance of a wider one agrees (one-sided)",
        (
            _TOLERANCE + "test_a_tip_then_smooth_runs_hold_the_towers_to_the_"
            "smooth_spread",
            _TOLERANCE + "test_a_tip_and_a_smooth_run_do_not_settle_in_"
            "either_order",
        ),
    ),
    Bug(
        "clipped_per_tower",
        "cifar10_multi_gpu_train.py",
        "    reduced = variable_update.reduce_gradients(update, tower_grads)\n"
        "    if clip_norm > 0:\n"
        "        reduced = [towers.clip_gradients(grads, clip_norm) "
        "for grads in reduced]\n",
        "    if clip_norm > 0:\n"
        "        tower_grads = [towers.clip_gradients(g, clip_norm) "
        "for g in tower_grads]\n"
        "    reduced = variable_update.reduce_gradients(update, tower_grads)\n",
        "gradients clipped per tower before the mean",
        (_CELL % "replicated-collective-tutorial-float32-2-1.5",),
    ),
    Bug(
        "shortcut_one_side",
        "cifar10_models/resnet.py",
        "[extra // 2, extra - extra // 2]",
        "[0, extra]",
        "the ResNet's shortcut pads its new channels on one side",
        (_RESNET,),
    ),
    Bug(
        "unfused_notice_shown",
        "multigpu/cpp_log_filter.py",
        "OpKernel for CPU devices ",
        "OpKernel for GPU devices ",
        "the runner's stderr shows the unfused float16 batch norm notice",
        (
            "tests/test_output.py::test_the_notice_of_an_unfused_float16_"
            "batch_norm_is_dropped_whole",
        ),
    ),
    Bug(
        "cuinit_notice_shown",
        "multigpu/cpp_log_filter.py",
        'rb"^E\\d{4} [^]]*\\] failed call to cuInit: "',
        'rb"^E\\d{4} [^]]*\\] failed call to cuInit; "',
        "the runner's stderr shows cuInit's error on a machine without a GPU",
        (
            "tests/test_output.py::test_the_harmless_lines_of_a_machine_"
            "without_a_gpu_are_dropped",
        ),
    ),
    Bug(
        "summed_gradients",
        "multigpu/graph/gradient_reduction.py",
        "return tf.math.add_n(grads) / len(grads)",
        "return tf.math.add_n(grads)",
        "the towers' gradients summed, not averaged",
        (_CELL % "parameter_server-None-tutorial-float32-2-0.0",),
    ),
    Bug(
        "rate_of_one_tower",
        "cifar10_multi_gpu_train.py",
        "examples = inputs.batch_size * len(update.devices) * "
        "task.replicas_per_step",
        "examples = inputs.batch_size * task.replicas_per_step",
        "the learning rate scaled by one tower's batch, not the step's",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "loss_scale_kept",
        "multigpu/graph/step_optimizer.py",
        "(g / scale if g is not None else None, v)",
        "(g if g is not None else None, v)",
        "float16 gradients applied still multiplied by the loss scale",
        (_CELL % "parameter_server-None-layers-float16 fixed-2-0.0",),
    ),
    Bug(
        "no_regularizers",
        "multigpu/graph/towers.py",
        'tf.compat.v1.get_collection("losses", scope)\n'
        "        + regularization_losses(scope),",
        'tf.compat.v1.get_collection("losses", scope),',
        "a tower's loss without the layers' regularization terms",
        (_CELL % "replicated-collective-get_variable-float32-4-0.0",),
    ),
    Bug(
        "statistics_not_committed",
        "multigpu/graph/gradient_reduction.py",
        "if not variables[name].trainable]",
        "if variables[name].trainable]",
        "the last tower's batch-norm statistics never reach the variables",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "averages_without_statistics",
        "multigpu/graph/any_model.py",
        "for var in tf.compat.v1.moving_average_variables():",
        "for var in []:",
        "the batch-norm statistics left out of the moving averages",
        (_CELL % "replicated-one_device-layers-float32-2-0.0",),
    ),
    Bug(
        "clip_norm_doubled",
        "multigpu/graph/towers.py",
        "tf.clip_by_global_norm(list(grads), clip_norm)",
        "tf.clip_by_global_norm(list(grads), 2 * clip_norm)",
        "gradients clipped to twice --clip_gradients",
        (
            "tests/test_towers.py::test_clipping_bounds_the_global_norm_of_"
            "the_averaged_gradients",
            _CELL % "replicated-collective-tutorial-float32-2-1.5",
        ),
    ),
    Bug(
        "no_ulp_floor",
        "verification/equivalence_tolerance.py",
        "float(np.spacing(np.float32(largest))),",
        "0.0,",
        "a spread of 0 where the measuring run repeats a value exactly",
        (
            _TOLERANCE + "test_a_spread_is_the_largest_gap_at_least_a_float32_"
            "ulp_and_0_for_an_int",
        ),
    ),
    Bug(
        "moved_in_float32",
        "verification/equivalence_tolerance.py",
        "np.spacing(np.abs(value).astype(compute_dtype))",
        "np.spacing(np.abs(value))",
        "the measuring run moved by a float32 ulp in a float16 cell",
        (
            _TOLERANCE + "test_moving_by_one_ulp_moves_each_value_by_its_"
            "float16_spacing",
        ),
    ),
    Bug(
        "shortcut_odd_pixels",
        "cifar10_models/resnet.py",
        "x = x[:, ::strides, ::strides, :]",
        "x = x[:, 1::strides, 1::strides, :]",
        "the ResNet's shortcut subsamples the odd pixels",
        (_RESNET,),
    ),
    Bug(
        "batch_norm_epsilon",
        "cifar10_models/resnet.py",
        "BATCH_NORM_EPSILON = 1e-5",
        "BATCH_NORM_EPSILON = 1e-3",
        "the ResNet's batch norm with Keras' epsilon, not the paper's",
        (_RESNET,),
    ),
    Bug(
        "reference_shared_by_clip",
        "verification/equivalence.py",
        "key = case._replace(update=None, all_reduce=None)",
        "key = (case.model, case.precision, case.towers)",
        "a clipped cell held to the unclipped cell's one device",
        (
            "tests/test_equivalence.py::test_cells_share_the_one_device_only_"
            "where_they_differ_in_the_update",
        ),
    ),
    Bug(
        "unsettled_row_ok",
        "verification/equivalence_table.py",
        'return "ok" if result.settled else '
        '"UNSETTLED (within its widest spread)"',
        'return "ok"',
        "a row of an unsettled cell within its widest spread reads ok",
        (
            _TOLERANCE + "test_a_row_says_ok_only_of_a_settled_cell_within_"
            "tolerance",
        ),
    ),
    Bug(
        "gate_removed",
        "multigpu/graph/gradient_reduction.py",
        "    gated = iter(tf.tuple(present + received, control_inputs=last))",
        "    gated = iter(present + received)",
        "a copy across workers updated before every collective has returned",
        (
            "tests/test_gradient_reduction.py::test_every_saved_variable_"
            "waits_for_every_collective_across_workers",
        ),
    ),
    Bug(
        "skip_on_local_gradients",
        "cifar10_multi_gpu_train.py",
        "        reduced = _reduce(update, tower_grads, options.clip_norm, "
        "loss_averages)\n"
        "        reduced = step_optimizer.skip_unless_finite(step.scaled, "
        "reduced)\n",
        "        tower_grads = step_optimizer.skip_unless_finite(step.scaled, "
        "tower_grads)\n"
        "        reduced = _reduce(update, tower_grads, options.clip_norm, "
        "loss_averages)\n",
        "the loss-scale skip decided on tower 0's local gradients",
        (_OVERFLOW % 1,),
    ),
    Bug(
        "skipped_step_averaged",
        "multigpu/graph/step_optimizer.py",
        "tf.where(applied, early, 1.0)",
        "early",
        "a step the loss scale skips still moves the moving averages",
        (_OVERFLOW % 0,),
    ),
    Bug(
        "sync_averages_per_worker_step",
        "cifar10_multi_gpu_train.py",
        "        if not step.moves_averages:\n",
        "        if True:\n",
        "sync replicas move the averages with each worker's step",
        (
            "tests/test_sync_replicas_averages.py::test_sync_replicas_move_"
            "each_average_once_per_global_step_not_per_worker",
        ),
    ),
    Bug(
        "every_towers_losses",
        "multigpu/graph/towers.py",
        'tf.compat.v1.get_collection("losses", scope)\n',
        'tf.compat.v1.get_collection("losses")\n',
        "a tower's loss sums the cross entropy of every tower before it",
        (_CELL % "parameter_server-None-tutorial-float32-2-0.0",),
    ),
    Bug(
        "lrn_gradient_without_window",
        "cifar10.py",
        "return upstream * scale - x * window_sum",
        "return upstream * scale",
        "the LRN's closed-form gradient without its window's term",
        (
            _LRN + "test_float32_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_float32_rounding",
            _LRN + "test_bfloat16_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_rounding",
        ),
    ),
    Bug(
        "lrn_window_narrowed",
        "cifar10.py",
        "window <= LRN_DEPTH_RADIUS",
        "window < LRN_DEPTH_RADIUS",
        "the LRN's window one channel short on each side",
        (
            _LRN + "test_float32_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_float32_rounding",
        ),
    ),
    Bug(
        "lrn_gradient_without_factor_2",
        "cifar10.py",
        "            2 * LRN_ALPHA * LRN_BETA * band,",
        "            LRN_ALPHA * LRN_BETA * band,",
        "the LRN's closed-form gradient without the factor 2 of x ** 2",
        (
            _LRN + "test_float32_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_float32_rounding",
            _LRN + "test_bfloat16_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_rounding",
        ),
    ),
    Bug(
        "lrn_power_half",
        "cifar10.py",
        "scale = root * tf.sqrt(root)",
        "scale = root",
        "the LRN's denominator to the power -1/2, not the tutorial's -3/4",
        (
            _LRN + "test_float32_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_float32_rounding",
            _LRN + "test_bfloat16_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_rounding",
        ),
    ),
    Bug(
        "lrn_alpha_per_channel",
        "cifar10.py",
        "LRN_ALPHA = 0.001 / 9.0",
        "LRN_ALPHA = 0.001",
        "the LRN's alpha not divided by its window of 9 channels",
        (
            _LRN + "test_float32_lrn_and_its_gradient_equal_the_tutorials_"
            "op_to_float32_rounding",
        ),
    ),
    Bug(
        "ring_bytes_halved",
        "multigpu/graph/network_plan.py",
        "    )[0][0]\n    leaving = 1",
        "    )[0][0] // 2\n    leaving = 1",
        "the network plan prices half the bytes a ring sends",
        (
            _LINKS + "test_float16_transfer_halves_the_ring_bytes_the_dry_"
            "run_prices",
        ),
    ),
    Bug(
        "link_bytes_read_as_bits",
        "multigpu/graph/network_plan.py",
        "max(out_bytes, in_bytes) * 8 / (gbits * 1e9)",
        "max(out_bytes, in_bytes) / (gbits * 1e9)",
        "network times priced 8 times too short: bytes read as bits",
        (
            _LINKS
            + "test_a_link_of_10_gbits_moves_1_25_gb_each_way_in_a_second",
        ),
    ),
    Bug(
        "clipped_per_tensor",
        "multigpu/graph/towers.py",
        "    clipped, _ = tf.clip_by_global_norm(list(grads), clip_norm)\n",
        "    clipped = [tf.clip_by_norm(g, clip_norm) for g in grads]\n",
        "each gradient clipped to the norm alone, not by the global norm",
        (
            "tests/test_towers.py::test_clipping_bounds_the_global_norm_of_"
            "the_averaged_gradients",
        ),
    ),
    Bug(
        "averages_without_early_rule",
        "multigpu/graph/step_optimizer.py",
        "early = tf.minimum(decay, (1.0 + step) / (10.0 + step))",
        "early = decay + 0.0 * step",
        "the moving averages decay at 0.9999 from step 0 (no num_updates rule)",
        (
            "tests/test_any_model.py::test_the_moving_mean_follows_the_last_"
            "towers_batch_with_every_step",
        ),
    ),
    Bug(
        "recall_at_3",
        "multigpu/graph/summaries.py",
        "RECALL_K = 5",
        "RECALL_K = 3",
        "the eval's recall @ 5 counts the labels among the top 3",
        (
            "tests/test_top_k_hits.py::test_precision_at_1_and_recall_at_5_"
            "count_the_labels_of_their_ranks",
        ),
    ),
    Bug(
        "scale_doubles_every_good_step",
        "multigpu/graph/step_optimizer.py",
        "self.good_steps.assign(tf.where(grow, 0, good_steps)),",
        "self.good_steps.assign(good_steps),",
        "the dynamic loss scale doubles on every good step once n have passed",
        (
            "tests/test_reduced_precision.py::test_the_dynamic_scale_doubles_"
            "once_per_n_good_steps",
        ),
    ),
    Bug(
        "bfloat16_sent_as_float32",
        "multigpu/graph/collectives.py",
        "and ring.transfer_dtype != tf.float32:",
        "and ring.transfer_dtype == tf.float16:",
        "--gradient_transfer_dtype=bfloat16 sends float32 (priced at 2 bytes)",
        (
            "tests/test_collective_cluster.py::test_float32_gradients_cross_"
            "as_bfloat16_when_asked",
        ),
    ),
    Bug(
        "replicas_to_aggregate_ignored",
        "multigpu/graph/step_optimizer.py",
        "replicas_to_aggregate=steps.replicas_to_aggregate,",
        "replicas_to_aggregate=steps.num_workers,",
        "the sync chief waits for every worker, not --replicas_to_aggregate",
        (
            "tests/test_sync_replicas_averages.py::test_the_sync_chief_"
            "applies_a_step_once_replicas_to_aggregate_arrived",
        ),
    ),
    Bug(
        "nan_gap_passed_over",
        "verification/equivalence_tolerance.py",
        "return float(np.max(gap, initial=0.0))",
        "return float(np.nanmax(gap, initial=0.0))",
        "the equivalence tolerance's gap passes over a NaN: it scores 0",
        (_TOLERANCE + "test_a_nan_of_the_towers_is_out_of_any_tolerance",),
    ),
]
