"""kscale.keras3.learning_rate (with kscale.learning_rate's rule): a Keras 3 optimizer, on any backend,
keeps the rate as written, reading gives it back, and every update applies it times the factor."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from kscale import loss_reduction
from kscale.keras3 import loss_scaling
from kscale.keras3.learning_rate import attach_scaling, rate_scaling, with_scaled_class
from kscale.keras3.rebuild import learning_rate_of

_weights: dict = {}


def step_size(optimizer, steps: int = 1) -> list[float]:
    """How far each of `steps` updates with a gradient of 1 moves a weight (SGD: the applied rate)."""
    # one weight per optimizer, as in a model (the optimizer kept, so that its id is never reused)
    _, variable = _weights.setdefault(id(optimizer), (optimizer, keras.Variable(np.zeros(1, "float32"))))
    moved = []
    for _ in range(steps):
        before = float(keras.ops.convert_to_numpy(variable)[0])
        optimizer.apply_gradients([(keras.ops.ones((1,)), variable)])
        moved.append(before - float(keras.ops.convert_to_numpy(variable)[0]))
    return moved


def scaled(optimizer, factor: float, warmup_steps: int = 0):
    scaling = rate_scaling(factor, warmup=warmup_steps > 0)
    attach_scaling(optimizer, scaling)
    scaling.set_warmup(warmup_steps)
    return optimizer


def test_updates_apply_the_written_rate_times_the_factor_and_reading_gives_it_back():
    optimizer = scaled(keras.optimizers.SGD(0.1), 4.0)
    assert step_size(optimizer) == pytest.approx([0.4])
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == pytest.approx(0.1)
    assert type(optimizer).__name__ == "SGD" and isinstance(optimizer, keras.optimizers.SGD)


def test_a_rate_written_later_is_applied_scaled():
    optimizer = scaled(keras.optimizers.SGD(0.1), 2.0)
    step_size(optimizer)
    optimizer.learning_rate = 0.05  # what LearningRateScheduler and ReduceLROnPlateau do
    assert step_size(optimizer) == pytest.approx([0.1])
    assert float(keras.ops.convert_to_numpy(optimizer.learning_rate)) == pytest.approx(0.05)


def test_a_schedule_keeps_decaying_and_is_applied_scaled():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    optimizer = scaled(keras.optimizers.SGD(schedule), 3.0)
    assert step_size(optimizer, 3) == pytest.approx([0.3, 0.15, 0.075])
    assert learning_rate_of(optimizer) is schedule


def test_weight_decay_is_applied_with_the_scaled_rate():
    optimizer = scaled(keras.optimizers.AdamW(0.1, weight_decay=0.5), 2.0)
    plain = keras.optimizers.AdamW(0.2, weight_decay=0.5)
    assert step_size(optimizer, 2) == pytest.approx(step_size(plain, 2), rel=1e-5)


def test_warmup_ramps_the_factor_from_one():
    optimizer = scaled(keras.optimizers.SGD(0.1), 4.0, warmup_steps=4)
    assert step_size(optimizer, 6) == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4])


def test_saved_configs_hold_the_written_rate_and_the_users_class():
    optimizer = scaled(keras.optimizers.Adam(0.003), 2.0)
    step_size(optimizer)
    config = keras.optimizers.serialize(optimizer)
    assert config["config"]["learning_rate"] == pytest.approx(0.003)
    assert config["class_name"] == "Adam"
    again = keras.optimizers.deserialize(config)
    assert type(again) is not type(optimizer) and float(again.learning_rate) == pytest.approx(0.003)


def test_a_users_registered_optimizer_class_keeps_its_registered_name():
    @keras.saving.register_keras_serializable(package="users_package")
    class UsersSGD(keras.optimizers.SGD):
        pass

    optimizer = scaled(UsersSGD(0.1), 2.0)
    assert type(optimizer) is not UsersSGD
    assert keras.saving.get_registered_name(type(optimizer)) == "users_package>UsersSGD"
    config = keras.optimizers.serialize(optimizer)
    assert type(keras.optimizers.deserialize(config)) is UsersSGD


def test_under_loss_scaling_the_inner_optimizer_applies_it():
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=1.0)
    attach_scaling(optimizer, rate_scaling(2.0, warmup=False))
    assert type(optimizer.inner_optimizer).__name__ == "SGD"
    if keras.backend.backend() == "jax":
        # On JAX Keras applies a LossScaleOptimizer statelessly, as fit does (eagerly its cond leaks a tracer).
        variable = keras.Variable(np.zeros(1, "float32"))
        optimizer.build([variable])
        values, _ = optimizer.stateless_apply(
            [v.value for v in optimizer.variables], [keras.ops.ones((1,))], [variable.value]
        )
        assert float(np.asarray(values[0])[0]) == pytest.approx(-0.2)
    else:
        assert step_size(optimizer) == pytest.approx([0.2])


def test_the_class_is_given_once():
    optimizer = with_scaled_class(with_scaled_class(keras.optimizers.SGD(0.1)))
    assert type(optimizer).__mro__[1] is type(keras.optimizers.SGD(0.1))


def test_a_loss_scale_is_made_as_one_process_once():
    """torch's optimizer_for applies it, and so does the copy that gradient accumulation makes: twice, a
    replica's loss would be scaled by S/R² (R: replicas)."""
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8.0)
    once = type(loss_scaling.as_one_process(optimizer))
    assert type(loss_scaling.as_one_process(optimizer)) is once
    with loss_reduction.replica_step(2):
        scaled = optimizer.scale_loss(keras.ops.convert_to_tensor(1.0))
    assert float(keras.ops.convert_to_numpy(scaled)) == 4.0  # S/R, as one process's numbers
