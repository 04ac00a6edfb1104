"""The planted bugs around a run's steps: the cluster, the eval, the input.

As `planted_step_bugs`' (each a text of one file, its replacement and the
quick checks that should catch it): the workers' agreement before step 1,
the other workers' start, the stop every worker agrees on, the lost
cluster's last save, the ps's step claims, watchdog and done tokens,
resumes and warm starts, the data record, event files, the eval's
restore, batch norm and input, the training input, MNIST's epochs, the
argparse era's flags, and the accident runner's expected steps.
`verification/planted_bugs.py` plants them.
"""

from verification.planted_step_bugs import Bug

_EVAL = (
    "tests/test_eval_moving_averages.py::test_the_eval_scores_the_averages_"
    "with_batch_norm_on_moving_statistics"
)
_DIGESTS = "tests/test_agreement_digests.py::"
_FLAGS = "tests/test_agreement_flags.py::"
_INPUT = "tests/test_cifar10_input.py::"
_RESTORE = "tests/test_restore.py::"

BUGS = [
    Bug(
        "digest_without_shapes",
        "multigpu/distributed/agreement.py",
        '"%s %s %s" % (v.op.name, v.shape, v.dtype.base_dtype.name)',
        '"%s %s" % (v.op.name, v.dtype.base_dtype.name)',
        "the workers' variables digest ignores the variables' shapes",
        (
            _DIGESTS + "test_a_model_whose_variables_change_shape_has_other_"
            "digests",
        ),
    ),
    Bug(
        "ops_digest_with_devices",
        "multigpu/distributed/agreement.py",
        'text = "%s(%s) -> %s" % (\n        op.type,',
        'text = "%s %s(%s) -> %s" % (\n        op.device,\n        op.type,',
        "the ops digest names each op's device: workers never agree",
        (
            _DIGESTS + "test_two_workers_of_one_model_have_one_digest_"
            "whatever_their_own_flags",
        ),
    ),
    Bug(
        "flag_left_local",
        "multigpu/flags/choices.py",
        '    " gpu_memory_fraction num_intra_threads num_inter_threads"\n',
        '    " gpu_memory_fraction num_intra_threads num_inter_threads"\n'
        '    " learning_rate"\n',
        "--learning_rate among the flags a worker may set on its own",
        (
            _FLAGS + "test_the_flags_a_worker_may_set_on_its_own_are_exactly_"
            "these",
            _FLAGS + "test_the_workers_compare_every_other_flag_of_a_trainer"
            "[cifar10_multi_gpu_train]",
        ),
    ),
    Bug(
        "start_from_trainable_only",
        "multigpu/graph/variable_update.py",
        "            tf.compat.v1.global_variables(),\n"
        "            update.task,",
        "            tf.compat.v1.trainable_variables(),\n"
        "            update.task,",
        "the other workers take only the chief's trainable variables at start",
        (
            "tests/test_chief_start_values.py::test_the_other_worker_takes_"
            "every_variable_of_the_chief_at_its_start",
        ),
    ),
    Bug(
        "stop_flag_not_reduced",
        "multigpu/graph/collectives.py",
        "    for each in (received, signals):\n",
        "    for each in (received, mine):\n",
        "the stop flag not all-reduced: each worker reads its own signal",
        (
            "tests/test_cluster_preemption.py::test_a_sigterm_to_one_worker_"
            "stops_every_workers_hook_after_one_step",
        ),
    ),
    Bug(
        "older_checkpoint_returned",
        "multigpu/distributed/sessions.py",
        "if newest and checkpoints.global_step(newest) == step:",
        "if newest:",
        "a lost cluster's chief returns its newest checkpoint, an older step",
        (
            "tests/test_last_step.py::test_the_chief_of_a_lost_cluster_saves_"
            "its_last_step_not_an_older_one",
        ),
    ),
    Bug(
        "eval_in_training_mode",
        "cifar10_eval.py",
        "logits = registry.logits(model, images, False, compute_dtype)",
        "logits = registry.logits(model, images, True, compute_dtype)",
        "the eval's batch norm in training mode (the batch's statistics)",
        (_EVAL,),
    ),
    Bug(
        "eval_raw_weights",
        "cifar10.py",
        "for name, var in averages.variables_to_restore().items()",
        "for name, var in {\n"
        "            v.op.name: v for v in tf.compat.v1.global_variables()\n"
        "        }.items()",
        "the eval restores the raw weights, not their moving averages",
        (_EVAL,),
    ),
    Bug(
        "eval_raw_statistics",
        "cifar10.py",
        "averages.variables_to_restore().items()",
        "averages.variables_to_restore(\n"
        "            tf.compat.v1.trainable_variables()\n"
        "        ).items()",
        "the eval restores the batch-norm statistics raw, not their averages",
        (_EVAL,),
    ),
    Bug(
        "one_crop_per_batch",
        "data_sets/cifar10_batches.py",
        "parameters = distortion_parameters(batch_size)",
        "parameters = [\n"
        "            tf.repeat(p, batch_size, axis=0)\n"
        "            for p in distortion_parameters(1)\n"
        "        ]",
        "one crop, flip, brightness and contrast for a whole training batch",
        (_INPUT + "test_each_image_of_a_batch_gets_its_own_crop_and_flip",),
    ),
    Bug(
        "labels_in_file_order",
        "data_sets/cifar10_batches.py",
        "tf.gather(labels, order)",
        "labels[:batch_size]",
        "a training batch's labels in file order, its images shuffled",
        (_INPUT + "test_crops_and_flips_vary_between_epochs",),
    ),
    Bug(
        "resume_from_oldest",
        "multigpu/train_dir/checkpoints.py",
        "for _, path in sorted(found, reverse=True)",
        "for _, path in sorted(found)",
        "a train_dir whose state file names none resumes its oldest checkpoint",
        (
            "tests/test_faults_checkpoints.py::test_a_garbage_state_file_"
            "gives_way_to_the_newest_checkpoint",
        ),
    ),
    Bug(
        "data_record_by_name",
        "multigpu/train_dir/train_dirs.py",
        "    if held == data:\n",
        "    if held[0] == data.description:\n",
        "a train_dir's data record checked by the data set's name only",
        (
            "tests/test_run_data.py::test_other_files_of_the_same_data_set_"
            "are_named_in_one_line",
        ),
    ),
    Bug(
        "signal_raised_inside_session_run",
        "multigpu/errors.py",
        "    if not _inside_session_run(frame):\n"
        "        raise Signalled(signum)",
        "    raise Signalled(signum)",
        "a signal raised inside a session run, where TensorFlow drops it",
        (
            "tests/test_ps_preemption.py::test_a_signal_taken_inside_a_"
            "session_run_is_raised_after_the_run",
        ),
    ),
    Bug(
        "event_file_name_shared",
        "multigpu/train_dir/event_files.py",
        'suffix = ".%d.%s" % (os.getpid(), secrets.token_hex(4))',
        'suffix = ".%d" % os.getpid()',
        "two writers of one second and process share an event file's name",
        (
            "tests/test_event_files.py::test_two_writers_opened_in_one_second_"
            "write_two_whole_files",
        ),
    ),
    Bug(
        "eval_drops_partial_batch",
        "data_sets/cifar10_batches.py",
        ".take(num_examples).batch(batch_size)",
        ".take(num_examples).batch(batch_size, drop_remainder=True)",
        "the eval leaves out the last partial batch",
        (_INPUT + "test_eval_input_yields_every_example_once_in_file_order",),
    ),
    Bug(
        "crops_from_0_to_7",
        "cifar10_input.py",
        "0, MAX_CROP_OFFSET + 1, tf.int32)",
        "0, MAX_CROP_OFFSET, tf.int32)",
        "training crops start at offsets 0..7, never 8",
        (
            "tests/test_cifar10_input_distribution.py::test_crop_offsets_cover"
            "_0_to_8_uniformly_in_each_axis_and_jointly",
        ),
    ),
    Bug(
        "image_one_byte_early",
        "cifar10_input.py",
        "raw[..., LABEL_BYTES:]",
        "raw[..., :-LABEL_BYTES]",
        "a record's image read one byte early: from its label on",
        (_INPUT + "test_records_are_written_depth_major_and_read_back_as_hwc",),
    ),
    Bug(
        "ps_steps_unclaimed",
        "multigpu/distributed/kinds.py",
        "step_optimizer=step_optimizer.claiming,",
        "step_optimizer=step_optimizer.plain,",
        "a ps cluster's steps no longer claim their global step",
        (
            "tests/test_step_claims.py::test_a_ps_step_whose_claim_passes_"
            "max_steps_writes_nothing",
        ),
    ),
    Bug(
        "ps_stops_before_last_worker",
        "multigpu/distributed/ps.py",
        "    while len(done) < task.num_workers:\n",
        "    while len(done) < task.num_workers - 1:\n",
        "a ps stops before its last worker says it is done",
        (
            "tests/test_ps_done_tokens.py::test_a_ps_serves_on_while_a_worker_"
            "has_not_said_it_is_done",
        ),
    ),
    Bug(
        "fine_tune_dropped",
        "multigpu/train_dir/restore.py",
        "warm_start(session, source, fine_tune)",
        "warm_start(session, source)",
        "--fine_tune dropped: the logits layer is restored too",
        (
            _RESTORE
            + "test_fine_tune_starts_the_logits_layer_afresh_and_keeps_"
            "the_others",
        ),
    ),
    Bug(
        "warm_start_requires_nothing",
        "multigpu/train_dir/restore.py",
        "trainable_variables())) & set(restored)",
        "trainable_variables())) & set(shadows)",
        "a warm start from a checkpoint of other names starts from scratch",
        (
            _RESTORE + "test_a_warm_start_from_a_checkpoint_of_other_names_is_"
            "an_error_naming_them",
        ),
    ),
    Bug(
        "watchdog_never_resets",
        "multigpu/distributed/ps.py",
        "                self._silent_since.pop(address, None)\n"
        "                continue\n",
        "                continue\n",
        "the ps watchdog's silence never restarts: a second blip ends a worker",
        (
            "tests/test_cluster_timeouts.py::test_the_ps_watchdog_ends_a_"
            "worker_only_after_a_silence_of_its_timeout",
        ),
    ),
    Bug(
        "mnist_shuffles_after_repeating",
        "mnist_input.py",
        "    if training:\n"
        "        records = records.shuffle(SHUFFLE_BUFFER)\n"
        "    records = records.repeat(num_epochs)\n",
        "    records = records.repeat(num_epochs)\n"
        "    if training:\n"
        "        records = records.shuffle(SHUFFLE_BUFFER)\n",
        "MNIST shuffles across epochs: an epoch repeats some records",
        (
            "tests/test_mnist_input.py::test_each_epoch_yields_every_record_"
            "once_in_its_own_order",
        ),
    ),
    Bug(
        "bare_use_fp16_none",
        "cifar10.py",
        'dict(type=script.boolean, nargs="?", const=True)',
        'dict(type=script.boolean, nargs="?")',
        "the argparse era's bare --use_fp16 parses to None: float32",
        (
            "tests/test_tutorial_scripts_2017.py::test_the_argparse_era_reads_"
            "a_bare_use_fp16_as_true_and_f_as_false",
        ),
    ),
    Bug(
        "within_any_step",
        "verification/accident_expect.py",
        "return step if low <= step <= high else -1",
        "return step",
        "the accident runner's expected range accepts any step",
        (
            "tests/test_accidents.py::test_a_step_outside_its_expected_range_"
            "reads_as_minus_1",
        ),
    ),
]
