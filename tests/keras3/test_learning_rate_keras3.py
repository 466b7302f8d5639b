"""kscale.keras3.learning_rate: the scaled, warmed-up rate as a Keras 3 schedule (keras.ops, any backend)."""

from __future__ import annotations

import keras
import pytest

from kscale.keras3.learning_rate import RATES, ScaledLearningRate


@pytest.mark.parametrize(("step", "expected"), [(0, 0.1), (5, 0.25), (10, 0.4), (50, 0.4)])
def test_warmup_ramps_linearly_from_base_to_scaled(step, expected):
    assert float(ScaledLearningRate(0.1, 4.0, warmup_steps=10)(step)) == pytest.approx(expected)


def test_a_base_schedule_keeps_decaying_and_is_scaled():
    base = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    rate = ScaledLearningRate(base, 2.0)
    assert float(rate(10)) == pytest.approx(0.1)  # 0.05 x 2


def test_config_round_trip_and_registered_name():
    rate = ScaledLearningRate(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5), 3.0, warmup_steps=7)
    again = ScaledLearningRate.from_config(rate.get_config())
    assert (again.factor, again.warmup_steps) == (3.0, 7) and float(again(20)) == pytest.approx(
        float(rate(20))
    )
    serialized = keras.optimizers.schedules.serialize(rate)
    assert serialized["registered_name"] == "kscale>ScaledLearningRate"
    assert isinstance(keras.optimizers.schedules.deserialize(serialized), ScaledLearningRate)


def test_scaled_keeps_a_float_without_warmup_and_describe():
    assert RATES.scaled(0.1, 2.0, warmup=False) == pytest.approx(0.2)
    assert isinstance(RATES.scaled(0.1, 2.0, warmup=True), ScaledLearningRate)
    assert RATES.describe(ScaledLearningRate(0.05, 2.0)) == "0.05 x 2" and RATES.describe(0.1) == 0.1


def test_the_module_earlier_files_name_still_gives_the_schedule():
    """Keras 3 files saved before the family packages name kscale.learning_rate_keras3 as the module."""
    import kscale.learning_rate_keras3 as earlier

    assert earlier.ScaledLearningRate is ScaledLearningRate


def test_import_kscale_learning_rate_registers_keras_3s_schedule():
    import kscale.learning_rate  # noqa: F401

    assert keras.saving.get_registered_object("kscale>ScaledLearningRate") is ScaledLearningRate
