"""kscale.keras2.learning_rate (with kscale.learning_rate's rule): a tf.keras optimizer keeps the rate as
written, reading gives it back, and every update applies it times the factor (ramped over the warmup)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from kscale.keras2.learning_rate import attach_scaling, rate_scaling, with_scaled_class
from kscale.keras2.rebuild import learning_rate_of

_weights: dict = {}


def step_size(optimizer, steps: int = 1) -> list[float]:
    """How far each of `steps` updates with a gradient of 1 moves a weight (SGD: the applied rate)."""
    # one weight per optimizer, as in a model (the optimizer kept, so that its id is never reused)
    _, variable = _weights.setdefault(id(optimizer), (optimizer, tf.Variable([0.0])))
    moved = []
    for _ in range(steps):
        before = float(variable.numpy()[0])
        optimizer.apply_gradients([(tf.constant([1.0]), variable)])
        moved.append(before - float(variable.numpy()[0]))
    return moved


def scaled(optimizer, factor: float, warmup_steps: int = 0):
    scaling = rate_scaling(factor, warmup=warmup_steps > 0)
    attach_scaling(optimizer, scaling)
    scaling.set_warmup(warmup_steps)
    return optimizer


@pytest.mark.parametrize("legacy", [False, True], ids=["optimizer", "legacy"])
def test_updates_apply_the_written_rate_times_the_factor_and_reading_gives_it_back(legacy):
    sgd = tf.keras.optimizers.legacy.SGD if legacy else tf.keras.optimizers.SGD
    optimizer = scaled(sgd(0.1), 4.0)
    assert step_size(optimizer) == pytest.approx([0.4])
    assert float(tf.keras.backend.get_value(optimizer.lr)) == pytest.approx(0.1)
    assert type(optimizer).__name__ == "SGD" and isinstance(optimizer, sgd)


@pytest.mark.parametrize("legacy", [False, True], ids=["optimizer", "legacy"])
def test_a_rate_written_later_is_applied_scaled(legacy):
    """What LearningRateScheduler, ReduceLROnPlateau and backend.set_value do after compile."""
    sgd = tf.keras.optimizers.legacy.SGD if legacy else tf.keras.optimizers.SGD
    optimizer = scaled(sgd(0.1), 2.0)
    step_size(optimizer)
    tf.keras.backend.set_value(optimizer.lr, 0.03)
    assert step_size(optimizer) == pytest.approx([0.06])
    optimizer.learning_rate = 0.05
    assert step_size(optimizer) == pytest.approx([0.1])
    assert float(tf.keras.backend.get_value(optimizer.learning_rate)) == pytest.approx(0.05)


def test_a_schedule_keeps_decaying_and_is_applied_scaled():
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    optimizer = scaled(tf.keras.optimizers.SGD(schedule), 3.0)
    assert step_size(optimizer, 3) == pytest.approx([0.3, 0.15, 0.075])
    assert learning_rate_of(optimizer) is schedule


def test_warmup_ramps_the_factor_from_one():
    optimizer = scaled(tf.keras.optimizers.SGD(0.1), 4.0, warmup_steps=4)
    assert step_size(optimizer, 6) == pytest.approx([0.1, 0.175, 0.25, 0.325, 0.4, 0.4])


def test_saved_configs_hold_the_written_rate_and_the_users_class():
    optimizer = scaled(tf.keras.optimizers.Adam(0.003), 2.0)
    step_size(optimizer)
    config = tf.keras.optimizers.serialize(optimizer)
    assert config["config"]["learning_rate"] == pytest.approx(0.003)
    assert config["class_name"] in ("Adam", "keras.optimizers.Adam", "Custom>Adam")
    again = tf.keras.optimizers.deserialize(config)
    assert float(again.learning_rate.numpy()) == pytest.approx(0.003)


def test_a_model_saved_to_h5_with_adamw_loads_without_kscale(tmp_path):
    """tf.keras 2.15 saves AdamW as "Custom>AdamW": kscale's class must too, or loading finds no 'AdamW'
    (generated seed 153 of lane A)."""
    inputs = tf.keras.Input((3,))
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(inputs))
    model.compile(optimizer=tf.keras.optimizers.AdamW(0.01), loss="mse")
    scaled(model.optimizer, 2.0)
    model.fit(np.ones((4, 3), "float32"), np.ones((4, 1), "float32"), verbose=0)
    saved = tf.keras.utils.get_registered_name(type(model.optimizer))
    assert saved == tf.keras.utils.get_registered_name(tf.keras.optimizers.AdamW)
    model.save(tmp_path / "model.h5")
    loaded = tf.keras.models.load_model(tmp_path / "model.h5")
    assert type(loaded.optimizer) is tf.keras.optimizers.AdamW  # what the name loads as is unchanged


def test_a_users_registered_optimizer_class_keeps_its_registered_name():
    @tf.keras.utils.register_keras_serializable(package="users_package")
    class UsersSGD(tf.keras.optimizers.SGD):
        pass

    optimizer = scaled(UsersSGD(0.1), 2.0)
    assert type(optimizer) is not UsersSGD
    assert tf.keras.utils.get_registered_name(type(optimizer)) == "users_package>UsersSGD"
    config = tf.keras.optimizers.serialize(optimizer)
    assert type(tf.keras.optimizers.deserialize(config)) is UsersSGD


def test_under_loss_scaling_the_inner_optimizer_applies_it():
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.1), dynamic=False, initial_scale=1.0
    )
    attach_scaling(optimizer, rate_scaling(2.0, warmup=False))
    assert type(optimizer.inner_optimizer).__name__ == "SGD"
    assert step_size(optimizer) == pytest.approx([0.2])


def test_the_class_is_given_once():
    optimizer = with_scaled_class(with_scaled_class(tf.keras.optimizers.SGD(0.1)))
    assert type(optimizer).__mro__[1] is tf.keras.optimizers.SGD


def test_horovod_style_subclass_of_the_scaled_class_does_not_recurse():
    """Horovod's DistributedOptimizer subclasses the class it is given and calls super(self.__class__)."""
    base = type(with_scaled_class(tf.keras.optimizers.SGD(0.1)))

    def apply_gradients(self, *args, **kwargs):
        return super(self.__class__, self).apply_gradients(*args, **kwargs)

    wrapped_class = type("SGD", (base,), {"apply_gradients": apply_gradients})
    optimizer = wrapped_class.from_config(tf.keras.optimizers.SGD(0.1).get_config())
    attach_scaling(optimizer, rate_scaling(2.0, warmup=False))
    assert step_size(optimizer) == pytest.approx([0.2])
    assert np.isfinite(step_size(optimizer)[0])


def test_horovods_optimizer_class_is_saved_as_the_users():
    """Horovod's DistributedOptimizer class is named like the user's but lives in horovod._keras: saved
    files (which record the module, and tf.keras 2.15's "Custom>AdamW") must name the user's class."""
    hvd = pytest.importorskip("horovod.tensorflow.keras")
    from kscale import subclassing

    inner = tf.keras.optimizers.AdamW(0.01)
    wrapped = hvd.DistributedOptimizer(inner)
    assert type(wrapped).__module__ != type(inner).__module__  # what save_as mends
    subclassing.save_as(type(wrapped), type(inner))
    assert (type(wrapped).__module__, type(wrapped).__qualname__) == (
        type(inner).__module__,
        type(inner).__qualname__,
    )
    registered = tf.keras.utils.get_registered_name
    assert registered(type(wrapped)) == registered(tf.keras.optimizers.AdamW)
    config = tf.keras.optimizers.serialize(wrapped)
    assert type(tf.keras.optimizers.deserialize(config)) is tf.keras.optimizers.AdamW
