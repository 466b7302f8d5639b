"""kscale.keras2.learning_rate (with kscale.learning_rate's rules): the scaled rate, its gradual warmup, and its
serialization."""

from __future__ import annotations

import pytest
import tensorflow as tf

from kscale.keras2.learning_rate import RATES, ScaledLearningRate
from kscale.keras2.rebuild import learning_rate_of


def at(schedule, step: int) -> float:
    return float(schedule(step))


@pytest.mark.parametrize(
    ("step", "expected"), [(0, 0.1), (2, 0.16), (5, 0.25), (10, 0.4), (11, 0.4), (1000, 0.4)]
)
def test_warmup_ramps_linearly_from_base_to_scaled(step, expected):
    schedule = ScaledLearningRate(0.1, factor=4, warmup_steps=10)
    assert at(schedule, step) == pytest.approx(expected)


def test_without_warmup_the_scaled_rate_applies_from_the_first_step():
    schedule = ScaledLearningRate(0.1, factor=4)
    assert at(schedule, 0) == pytest.approx(0.4)
    assert at(schedule, 50) == pytest.approx(0.4)


def test_warmup_steps_can_be_set_when_fit_starts():
    schedule = ScaledLearningRate(0.1, factor=2)
    schedule.warmup_steps.assign(4)
    assert [at(schedule, s) for s in (0, 2, 4)] == pytest.approx([0.1, 0.15, 0.2])


def test_a_base_schedule_is_followed_and_scaled():
    base = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    schedule = ScaledLearningRate(base, factor=3, warmup_steps=10)
    for step in (0, 5, 10, 20, 40):
        progress = min(step / 10, 1.0)
        expected = float(base(step)) * (1 + 2 * progress)
        assert at(schedule, step) == pytest.approx(expected, rel=1e-6), step
    assert at(schedule, 20) == pytest.approx(0.1 * 0.25 * 3)


@pytest.mark.parametrize(
    "base",
    [0.05, tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)],
    ids=["float", "schedule"],
)
def test_config_round_trip(base):
    schedule = ScaledLearningRate(base, factor=2.5, warmup_steps=6)
    config = schedule.get_config()
    assert config["factor"] == 2.5 and config["warmup_steps"] == 6
    again = ScaledLearningRate.from_config(config)
    assert type(again.base) is type(base)
    assert int(again.warmup_steps.numpy()) == 6
    for step in (0, 3, 6, 30):
        assert at(again, step) == pytest.approx(at(schedule, step))
    assert again.get_config() == config


def test_serialized_through_keras_by_its_registered_name():
    schedule = ScaledLearningRate(0.1, factor=2, warmup_steps=3)
    again = tf.keras.optimizers.schedules.deserialize(tf.keras.optimizers.schedules.serialize(schedule))
    assert isinstance(again, ScaledLearningRate)
    assert at(again, 1) == pytest.approx(at(schedule, 1))
    optimizer = tf.keras.optimizers.SGD(schedule)
    rebuilt = tf.keras.optimizers.SGD.from_config(optimizer.get_config())
    restored = learning_rate_of(rebuilt)
    assert isinstance(restored, ScaledLearningRate) and restored is not schedule
    assert at(restored, 3) == pytest.approx(0.2)


def test_scaled_keeps_a_float_when_there_is_no_warmup():
    lr = RATES.scaled(0.1, 4, warmup=False)
    assert isinstance(lr, float) and lr == pytest.approx(0.4)


def test_scaled_with_warmup_is_a_schedule():
    lr = RATES.scaled(0.1, 4, warmup=True)
    assert isinstance(lr, ScaledLearningRate)
    assert (lr.base, lr.factor) == (0.1, 4.0)


def test_scaled_schedule_without_warmup_is_a_schedule_scaled_from_the_start():
    base = tf.keras.optimizers.schedules.PiecewiseConstantDecay([5], [0.1, 0.01])
    lr = RATES.scaled(base, 2, warmup=False)
    assert isinstance(lr, ScaledLearningRate) and lr.base is base
    assert at(lr, 0) == pytest.approx(0.2) and at(lr, 10) == pytest.approx(0.02)


def test_describe():
    base = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    assert RATES.describe(0.25) == 0.25
    assert RATES.describe(base) == "ExponentialDecay"
    assert RATES.describe(ScaledLearningRate(0.1, 4)) == "0.1 x 4"
    assert RATES.describe(ScaledLearningRate(base, 2)) == "ExponentialDecay x 2"
