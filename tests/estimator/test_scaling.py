import math

import pytest

from kscale.errors import OptionError
from kscale.estimator import lr_scale_factor, num_train_steps, num_warmup_steps, scale_learning_rate


@pytest.mark.parametrize(("rule", "size", "factor"), [("linear", 4, 4.0), ("sqrt", 4, 2.0), ("none", 8, 1.0)])
def test_lr_scale_factor(rule, size, factor):
    assert lr_scale_factor(rule, size) == factor


def test_unknown_rule_lists_the_valid_ones():
    with pytest.raises(OptionError, match="'linear', 'sqrt', 'none'"):
        lr_scale_factor("cubic", 2)


def test_scale_learning_rate_defaults_to_the_launchers_world_size(fake_workers):
    assert scale_learning_rate(3e-5) == 3e-5  # single process
    fake_workers(rank=1, size=4)
    assert scale_learning_rate(3e-5) == pytest.approx(12e-5)
    assert scale_learning_rate(3e-5, "sqrt") == pytest.approx(6e-5)
    assert scale_learning_rate(3e-5, world_size=1) == 3e-5


def test_num_train_steps_divides_the_single_process_count():
    single = num_train_steps(88_641, 12, 2.0)
    assert single == int(88_641 / 12 * 2.0) == 14_773
    assert num_train_steps(88_641, 12, 2.0, world_size=2) == single // 2
    assert num_train_steps(88_641, 12, 2.0, world_size=8) == single // 8


def test_num_train_steps_is_at_least_one():
    assert num_train_steps(3, 32, 1.0, world_size=4) == 1


def test_num_train_steps_rejects_nonsense():
    with pytest.raises(OptionError):
        num_train_steps(10, 0, 1.0)
    with pytest.raises(OptionError, match="world_size"):
        num_train_steps(10, 2, 1.0, world_size=0)


def test_warmup_is_a_proportion_of_the_per_worker_steps():
    per_worker = num_train_steps(1000, 10, 1.0, world_size=2)  # 50
    assert num_warmup_steps(per_worker, 0.1) == 5  # not divided by the world size a second time
    with pytest.raises(OptionError):
        num_warmup_steps(50, 1.5)


def test_sqrt_factor_is_exact():
    assert lr_scale_factor("sqrt", 2) == math.sqrt(2)
