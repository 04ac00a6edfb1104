"""The planted bugs around a run's steps: the cluster, the eval, the input.

As `planted_step_bugs`' (each a text of one file, its replacement and the
quick checks that should catch it): the workers' agreement before step 1,
the other workers' start, the stop every worker agrees on, the lost
cluster's last save, the eval's restore and batch norm, and the training
input. `verification/planted_bugs.py` plants them.
"""

from verification.planted_step_bugs import Bug

_EVAL = (
    "tests/test_eval_moving_averages.py::test_the_eval_scores_the_averages_"
    "with_batch_norm_on_moving_statistics"
)
_DIGESTS = "tests/test_agreement_digests.py::"
_FLAGS = "tests/test_agreement_flags.py::"
_INPUT = "tests/test_cifar10_input.py::"

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
]
