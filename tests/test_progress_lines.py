"""How often a run prints its progress line (`loop_hooks.every_tenth`)."""

from multigpu.run import loop_hooks


def test_a_short_run_prints_a_line_every_tenth_of_its_steps():
    # MNIST's default run: 60 steps, --log_frequency 100.
    assert loop_hooks.every_tenth(100, 60) == 6
    assert loop_hooks.every_tenth(10, 25) == 3
    assert loop_hooks.every_tenth(10, 3) == 1


def test_a_long_run_prints_a_line_every_log_frequency_steps():
    assert loop_hooks.every_tenth(10, 1000000) == 10
    assert loop_hooks.every_tenth(10, 100) == 10
