"""float16 loss scaling, and bfloat16 only on CPUs with its instructions."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import SHADOW, error_line, trainer_flags

import cifar10_multi_gpu_train
from cifar10_models import registry
from multigpu.graph import (
    op_kernels,
    placement,
    step_optimizer,
    variable_update,
)
from multigpu.graph import towers as copy_names
from verification import sessions

# float16 rounds values below half its smallest subnormal (2**-24) to zero.
FLOAT16_TINY = 2.0**-24


def one_step(gradient_factor, scaling, steps=1, learning_rate=1.0):
    """Trains w = [1, 2] float32 on loss = sum(w) * factor.

    The loss is sum(w * sqrt(factor)) computed in float16, then times
    sqrt(factor) in float32 (as a mean over many examples scales it): the
    backward pass reaches float16 with sqrt(factor) and multiplies it by
    sqrt(factor) there, as a layer of a float16 network would.

    Returns:
      (w after the steps, the global step, the loss scale after the steps,
      the gradient of the first step).
    """
    root = np.sqrt(gradient_factor)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        loss16 = tf.reduce_sum(
            tf.cast(w, tf.float16) * tf.constant(root, tf.float16)
        )
        loss = tf.cast(loss16, tf.float32) * root
        opt = step_optimizer.wrap(
            tf.compat.v1.train.GradientDescentOptimizer(learning_rate),
            scaling,
        )
        (grads_and_vars,) = step_optimizer.skip_unless_finite(
            opt, [opt.compute_gradients(loss)]
        )
        train_op = opt.apply_gradients(grads_and_vars, global_step)
        scale = opt.loss_scale if scaling else tf.constant(1.0)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            grad = sess.run(grads_and_vars[0][0])
            for _ in range(steps):
                sess.run(train_op)
            return tuple(sess.run([w, global_step, scale])) + (grad,)


def fixed(scale):
    return step_optimizer.LossScaling(scale, False, 1000)


def test_a_gradient_that_underflows_in_float16_trains_with_a_loss_scale():
    # d loss / d w = 1e-8: below float16's smallest subnormal.
    factor = 1e-8
    assert factor < FLOAT16_TINY

    w_plain, _, _, grad_plain = one_step(factor, None, learning_rate=1e6)
    w_scaled, _, _, grad_scaled = one_step(
        factor, fixed(2.0**15), learning_rate=1e6
    )

    np.testing.assert_array_equal(grad_plain, [0.0, 0.0])
    np.testing.assert_array_equal(w_plain, [1.0, 2.0])
    # 1e-8 * 2**15 = 3.3e-4 is a normal float16; 3 significant digits.
    np.testing.assert_allclose(grad_scaled, [1e-8, 1e-8], rtol=1e-3)
    np.testing.assert_allclose(w_scaled, [0.99, 1.99], rtol=1e-5)


def test_where_nothing_underflows_scaled_and_unscaled_steps_are_equal():
    w_plain, _, _, grad_plain = one_step(0.25, None)
    w_scaled, _, _, grad_scaled = one_step(0.25, fixed(128.0))

    np.testing.assert_array_equal(grad_scaled, grad_plain)
    np.testing.assert_array_equal(w_scaled, w_plain)
    np.testing.assert_array_equal(w_plain, [0.75, 1.75])


def test_a_non_finite_step_is_skipped_and_the_scale_halves():
    # At a scale of 2**15 the float16 backward pass starts at 2 * 2**15:
    # past float16's largest value, 65504.
    dynamic = step_optimizer.LossScaling(2.0**15, True, 1000)

    w, global_step, scale, grad = one_step(4.0, dynamic)

    np.testing.assert_array_equal(grad, [0.0, 0.0])
    np.testing.assert_array_equal(w, [1.0, 2.0])
    assert scale == 2.0**14
    assert global_step == 1


def test_one_towers_overflow_in_the_mean_skips_the_step_of_every_copy():
    # The mean of the towers' (or workers') gradients, as every copy holds
    # it after the all-reduce: one tower overflowed, the other did not.
    dynamic = step_optimizer.LossScaling(2.0**15, True, 1000)
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        global_step = tf.compat.v1.train.get_or_create_global_step()
        opt = step_optimizer.wrap(
            tf.compat.v1.train.GradientDescentOptimizer(1.0), dynamic
        )
        mean = tf.reduce_mean([[np.inf, 1.0], [1.0, 1.0]], axis=0)
        copies = step_optimizer.skip_unless_finite(
            opt, [[(mean, w)], [(mean, w)]]
        )
        train_op = opt.apply_gradients(copies[0], global_step)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            applied, zeros = sess.run(
                [step_optimizer.step_applied(opt), [g for g, _ in copies[1]]]
            )
            sess.run(train_op)
            w_after, scale = sess.run([w, opt.loss_scale])

    assert not applied
    np.testing.assert_array_equal(zeros, [[0.0, 0.0]])
    np.testing.assert_array_equal(w_after, [1.0, 2.0])
    assert scale == 2.0**14


def _replicated_float16_step(overflowing, initial_scale):
    """One step of the trainer's graph on 2 CPU towers, replicated, float16
    with the dynamic loss scale; tower overflowing's images overflow float16
    (65504) in its first layer, so only its gradients are not finite.

    The moving averages start half their weights, so a step that moved
    them would change them even where the weights stay put.

    Returns:
      dict name -> (value before, value after) of every global variable but
      the averages of the last tower's losses, and of every copy.
    """
    devices = ["/cpu:0", "/cpu:1"]
    rng = np.random.RandomState(0)
    towers = iter(range(len(devices)))

    def get_next():
        size = 1e5 if next(towers) == overflowing else 1.0
        images = rng.uniform(-1, 1, [2, 24, 24, 3]) * size
        labels = rng.randint(0, 10, [2])
        return tf.constant(images, tf.float32), tf.constant(labels, tf.int32)

    with tf.Graph().as_default():
        _, train_op, _, _ = cifar10_multi_gpu_train.build_graph(
            inputs=cifar10_multi_gpu_train.TowerInput(get_next, 2),
            update=variable_update.variable_update("replicated", devices),
            dtypes=step_optimizer.Dtypes(
                tf.float16,
                step_optimizer.LossScaling(initial_scale, True, 1000),
            ),
        )
        variables = [
            v
            for v in tf.compat.v1.global_variables()
            if not v.op.name.endswith("/avg")
        ] + [
            v
            for v in tf.compat.v1.local_variables()
            if copy_names.primary_name(v.op.name)
        ]
        halve_averages = [
            v.assign(v * 0.5) for v in variables if v.op.name.endswith(SHADOW)
        ]
        with tf.compat.v1.Session(
            config=placement.session_config(devices)
        ) as sess:
            sessions.initialise(sess)
            sess.run(halve_averages)
            before = sess.run(variables)
            sess.run(train_op)
            after = sess.run(variables)
    return {v.op.name: pair for v, pair in zip(variables, zip(before, after))}


@pytest.mark.parametrize("overflowing", [0, 1])
def test_one_towers_float16_overflow_skips_the_step_of_every_copy(
    overflowing,
):
    values = _replicated_float16_step(overflowing, 1024.0)

    counters = {
        "global_step": 1,
        "loss_scale": 512.0,
        step_optimizer.SKIPPED_STEPS: 1,
    }
    assert {name: values[name][1] for name in counters} == counters
    kept = [name for name in values if name not in counters]
    # The weights, their averages, the scale's good steps, and tower 1's
    # copies of the weights.
    assert len(kept) == 3 * 10 + 1, kept
    for name in kept:
        before, after = values[name]
        assert after.tobytes() == before.tobytes(), name


def test_the_dynamic_scale_halves_until_finite_then_doubles_after_n_steps():
    # 2**15 and 2**14 overflow; 2**13 trains; 3 good steps double it.
    dynamic = step_optimizer.LossScaling(2.0**15, True, 3)

    w, global_step, scale, _ = one_step(4.0, dynamic, steps=5)

    np.testing.assert_array_equal(w, [1.0 - 3 * 4.0, 2.0 - 3 * 4.0])
    assert scale == 2.0**14
    assert global_step == 5


def test_the_dynamic_scale_doubles_once_per_n_good_steps():
    # No step overflows below 2 ** 16; 5 good steps of n = 2 double the
    # scale twice, at steps 2 and 4.
    dynamic = step_optimizer.LossScaling(2.0**10, True, 2)

    _, global_step, scale, _ = one_step(1.0, dynamic, steps=5)

    assert (global_step, scale) == (5, 2.0**12)


def test_loss_scaling_applies_to_float16_only():
    scaling = step_optimizer.loss_scaling(tf.bfloat16, 128, True, 10, False)
    assert scaling is None
    assert step_optimizer.loss_scaling(tf.float16, 128, True, 10, False) == (
        step_optimizer.LossScaling(128.0, True, 10)
    )


def test_the_dynamic_scale_with_sync_replicas_is_an_error():
    with pytest.raises(ValueError) as raised:
        step_optimizer.loss_scaling(tf.float16, 128, True, 10, True)

    assert str(raised.value) == (
        "--fp16_enable_auto_loss_scale does not work with --sync_replicas; "
        "use a fixed --fp16_loss_scale"
    )


def test_use_fp16_on_a_cpu_with_bfloat16_instructions_computes_in_bfloat16(
    capsys,
):
    dtype = placement.compute_dtype(True, ["/cpu:0"], cpu_bfloat16=True)

    assert dtype == tf.bfloat16
    assert capsys.readouterr().out == (
        "--use_fp16: computing in bfloat16 on the CPU, which has bfloat16 "
        "instructions (variables stay float32)\n"
    )


def test_use_fp16_on_a_cpu_without_them_computes_in_float32_and_says_so(
    capsys,
):
    dtype = placement.compute_dtype(True, ["/cpu:0"], cpu_bfloat16=False)

    assert dtype == tf.float32
    assert capsys.readouterr().err == (
        "WARNING: --use_fp16 on a CPU without bfloat16 instructions "
        "(AVX512_BF16 or AMX), where bfloat16 is emulated about 10x slower: "
        "computing in float32; pass --force_cpu_bfloat16 to use bfloat16 "
        "anyway.\n"
    )


def test_force_cpu_bfloat16_computes_in_bfloat16_without_the_instructions(
    capsys,
):
    dtype = placement.compute_dtype(
        True, ["/cpu:0"], force_cpu_bfloat16=True, cpu_bfloat16=False
    )

    assert dtype == tf.bfloat16
    assert capsys.readouterr().out == (
        "--use_fp16: computing in bfloat16 on the CPU, emulated without its "
        "instructions (--force_cpu_bfloat16) (variables stay float32)\n"
    )


def test_gpus_compute_in_float16_whatever_the_cpu(capsys):
    assert placement.compute_dtype(True, ["/gpu:0"], cpu_bfloat16=False) == (
        tf.float16
    )
    assert capsys.readouterr().out == (
        "--use_fp16: computing in float16 on the GPUs (variables stay "
        "float32)\n"
    )


@pytest.mark.parametrize(
    "flags_line, expected",
    [
        ("flags\t\t: fpu sse avx512f avx512_bf16 amx_tile\n", True),
        ("flags\t\t: fpu sse amx_bf16\n", True),
        ("flags\t\t: fpu sse avx512f avx512_vnni\n", False),
    ],
)
def test_the_bfloat16_instructions_are_read_from_cpuinfo(
    flags_line, expected, tmp_path
):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\n" + flags_line)

    assert placement.cpu_has_bfloat16(str(cpuinfo)) is expected
    assert placement.cpu_has_bfloat16(str(tmp_path / "absent")) is False


# A user's model with the tutorial's local response normalisation, as
# slim's CifarNet has it: TensorFlow has no bfloat16 CPU kernel of LRN.
LRN_MODEL = """
import tensorflow as tf


def net(images, is_training):
    conv = tf.compat.v1.layers.conv2d(images, 8, 3, name="conv1")
    norm = tf.nn.lrn(conv, name="norm1")
    flat = tf.compat.v1.layers.flatten(norm)
    return tf.compat.v1.layers.dense(flat, 10, name="logits")
"""


@pytest.mark.slow
def test_a_bfloat16_op_without_a_cpu_kernel_is_refused_before_step_1(
    cifar10_data_dir, tmp_path
):
    (tmp_path / "lrn_models.py").write_text(LRN_MODEL)
    line = error_line(
        "cifar10_multi_gpu_train.py",
        "--cpu_towers",
        "--num_gpus=2",
        "--use_fp16",
        "--force_cpu_bfloat16",
        "--model=lrn_models:net",
        *trainer_flags(cifar10_data_dir, tmp_path / "train"),
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert line == (
        "cifar10_multi_gpu_train.py: error: --use_fp16: 2 op(s) compute in "
        "bfloat16, for which this TensorFlow build has no CPU kernel: norm1 "
        "(LRN, T=bfloat16) in layer norm1; gradients/norm1_grad/LRNGrad "
        "(LRNGrad, T=bfloat16) in layer norm1; compute those layers in "
        "float32 (cast their input to float32 and their output back), or "
        "train without --use_fp16"
    )
    assert not (tmp_path / "train").exists()


@pytest.mark.parametrize("name", ["tutorial", "resnet20"])
def test_the_suites_nets_in_bfloat16_have_a_cpu_kernel_for_every_op(name):
    with tf.Graph().as_default() as graph:
        images = tf.zeros([2, 24, 24, 3])
        model = registry.model(name, 0.0, [], 0.0)
        logits = registry.logits(model, images, True, tf.bfloat16)
        tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
            tf.reduce_sum(logits)
        )
        num_variables = len(tf.compat.v1.trainable_variables())
    checked = op_kernels.refuse_bfloat16_without_cpu_kernel(graph, tf.bfloat16)
    # Nothing refused, of at least a read of each variable and its gradient.
    assert checked > 2 * num_variables
